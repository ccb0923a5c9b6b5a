"""Tooling used by tests and benchmarks only (not by a run): kernel-rxe QEMU guests, perftest interop."""
