"""Per-phase timing of the hierarchical algorithms: how long each step of a collective (HB reduce-scatter, rail
exchange, HB all-gather, ...) took on this rank, so the testbed can set each against its own link's bound.

An algorithm wraps each phase in `with phase(comm, "hb_reduce_scatter"):`; the rank program sets `comm.phase_log`
to a list before an operation and reads [(name, seconds), ...] from it afterwards. A communicator without a log
(a SubComm of the training iteration, the unit tests) times nothing.
"""
from __future__ import annotations

import time
from contextlib import contextmanager

# The phases' names, in the order they run, with the link each one uses.
LINKS = {"hb_reduce_scatter": "hb", "rail_exchange": "nic", "hb_allgather": "hb", "rail_allgather": "nic",
         "hb_exchange": "hb", "pipelined": "hb+nic", "allgather": "ring", "reduce_scatter": "ring"}


@contextmanager
def phase(comm, name: str):
    log = getattr(comm, "phase_log", None)
    if log is None:
        yield
        return
    t0 = time.monotonic()
    try:
        yield
    finally:
        log.append((name, time.monotonic() - t0))
