# The two commands a newcomer runs are `make demo` and `make test`; both set themselves up.
SHELL := /bin/bash
PY := .venv/bin/python
SCENARIO ?= scenarios/demo.yaml
OUT ?=
# Optional extras (scripts/setup --extras): tf (TensorFlow, for the offload workload), torch. The tests use both.
EXTRAS ?=

.PHONY: setup demo test test-unit test-fast clean vm vm-test vm-down

setup:
	@scripts/setup $(if $(EXTRAS),--extras $(EXTRAS))

test test-unit test-fast: EXTRAS = tf,torch

# Start and stop in one shell: the services count that shell as their user until it stops them.
demo: setup
	@trap 'scripts/ovs-stop' EXIT; scripts/ovs-start && .venv/bin/testbed run $(SCENARIO) $(if $(OUT),--out $(OUT))

test: setup
	@trap '.venv/bin/testbed clean >/dev/null; scripts/dockerd-stop; scripts/ovs-stop' EXIT; \
		scripts/ovs-start && scripts/dockerd-start && $(PY) -m pytest -q -rs --durations=15 tests

test-unit: setup
	$(PY) -m pytest -q -rs -m "not root" tests

test-fast: setup
	@trap '.venv/bin/testbed clean >/dev/null; scripts/dockerd-stop; scripts/ovs-stop' EXIT; \
		scripts/ovs-start && scripts/dockerd-start && $(PY) -m pytest -q -rs -m "not slow and not qemu" tests

clean:
	@if [ -x .venv/bin/testbed ]; then .venv/bin/testbed clean; fi

# The Vagrant VM on this machine (libvirt; software emulation where there is no usable KVM): docs/vm.md.
# `make vm` builds the local box if needed and boots it (left running: scripts/vm-vagrant ssh, make vm-down);
# `make vm-test` boots it, runs the checks inside and destroys it.
vm: setup
	@scripts/vm-up

vm-test: setup
	@scripts/vm-test

vm-down:
	@scripts/vm-down
