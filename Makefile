# The two commands a newcomer runs are `make demo` and `make test`; both set themselves up.
SHELL := /bin/bash
PY := .venv/bin/python
SCENARIO ?= scenarios/demo.yaml
OUT ?=

.PHONY: setup demo test test-unit clean

setup:
	@scripts/setup

demo: setup
	@scripts/ovs-start
	@trap 'scripts/ovs-stop' EXIT; .venv/bin/testbed run $(SCENARIO) $(if $(OUT),--out $(OUT))

test: setup
	@scripts/ovs-start
	@trap '.venv/bin/testbed clean >/dev/null; scripts/dockerd-stop; scripts/ovs-stop' EXIT; \
		scripts/dockerd-start && $(PY) -m pytest -q -rs tests

test-unit: setup
	$(PY) -m pytest -q -rs -m "not root" tests

clean:
	@if [ -x .venv/bin/testbed ]; then .venv/bin/testbed clean; fi
