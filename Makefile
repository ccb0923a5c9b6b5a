# The two commands a newcomer runs are `make demo` and `make test`; both set themselves up.
SHELL := /bin/bash
PY := .venv/bin/python
SCENARIO ?= scenarios/demo.yaml
OUT ?=
# Optional extras (scripts/setup --extras): tf (TensorFlow, for the offload workload), torch, dev (shellcheck, ruby,
# Vagrant: tools the tests drive). The tests use all three.
EXTRAS ?=

.PHONY: setup demo test test-unit test-fast test-long bench bench-quick clean vm vm-test vm-down

setup:
	@scripts/setup $(if $(EXTRAS),--extras $(EXTRAS))

test test-unit test-fast test-long: EXTRAS = tf,torch,dev

# Start and stop in one shell: the services count that shell as their user until it stops them.
demo: setup
	@trap 'scripts/ovs-stop' EXIT; scripts/ovs-start && .venv/bin/testbed run $(SCENARIO) $(if $(OUT),--out $(OUT))

# Two passes: the tests that bring up no fabric, container or guest and need no CPU headroom, spread over 4
# workers (many wait on sockets and timers); then the others one at a time: two fabrics at once (fabric tags), or
# a paced sender beside three other workers on 2 cores, make the performance floors and millisecond timings of
# some tests miss (docs/testing.md). Both run; either failing fails.
NO_FABRIC := not root and not docker and not qemu and not alone
PYTEST := $(PY) -m pytest -q -rs
# $(call two_passes,MORE_MARKERS,MORE_OPTIONS): MORE_MARKERS narrows the second pass ("and not slow", say)
two_passes = $(PYTEST) -n 4 -m "$(NO_FABRIC)" tests; a=$$?; \
	$(PYTEST) $(2) -m "not ($(NO_FABRIC))$(1)" tests; b=$$?; [ $$a = 0 ] && [ $$b = 0 ]

test: setup
	@trap '.venv/bin/testbed clean >/dev/null; scripts/dockerd-stop; scripts/ovs-stop' EXIT; \
		scripts/ovs-start && scripts/dockerd-start || exit 1; \
		$(call two_passes, and not long,--durations=15)

test-unit: setup
	$(PYTEST) -n 4 -m "not root" tests

test-fast: setup
	@trap '.venv/bin/testbed clean >/dev/null; scripts/dockerd-stop; scripts/ovs-stop' EXIT; \
		scripts/ovs-start && scripts/dockerd-start || exit 1; \
		$(call two_passes, and not slow and not qemu and not long,)

# The soaks of ten minutes or more (32 kills at seeded moments, say): one at a time.
test-long: setup
	@trap '.venv/bin/testbed clean >/dev/null; scripts/dockerd-stop; scripts/ovs-stop' EXIT; \
		scripts/ovs-start && scripts/dockerd-start || exit 1; \
		$(PYTEST) -m long tests

# The README's Measured table: every figure measured with repeats, docs/measured.md and the table rewritten
# (benchmarks/measured.py; fails when a figure is more than 15% worse than the one published). Hours; the quick
# set under 30 minutes. Run them with nothing else on the machine.
bench bench-quick: EXTRAS = tf,torch,dev
bench bench-quick: setup
	@trap '.venv/bin/testbed clean >/dev/null; scripts/dockerd-stop; scripts/ovs-stop' EXIT; \
		scripts/ovs-start && scripts/dockerd-start || exit 1; \
		.venv/bin/python benchmarks/measured.py $(if $(filter bench-quick,$@),--quick)

# A seed paper's claims beside its figures (testbed paper NAME; docs/papers.md): make paper-rail-only
paper-%: EXTRAS = tf,torch,dev
paper-%: setup
	@trap '.venv/bin/testbed clean >/dev/null; scripts/ovs-stop' EXIT; scripts/ovs-start && \
		.venv/bin/testbed paper $* $(if $(QUICK),--quick)

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
