"""One rank of a DiLoCo run, inside an emulated GPU host, started by the testbed's `diloco` workload.

    python -m hosts.agents.diloco_rank SPEC.json

SPEC: a DilocoRankSpec as JSON (hosts/spec/rank.py: its fields, their meaning and defaults).

What the rank does, and what it prints: hosts/collectives/diloco_rank.py.
"""
from __future__ import annotations

import json
import sys
import time

from hosts.collectives.comm import CollectiveError
from hosts.collectives.diloco_rank import run_rank
from hosts.collectives.rank import build_comm, finish
from hosts.collectives.store import FileStore, StoreTimeout
from hosts.spec.rank import DilocoRankSpec


def main() -> None:
    spec = DilocoRankSpec.load(sys.argv[1])
    peers, me = list(spec.peers), spec.rank
    store = FileStore(spec.store, timeout=spec.timeout_s)
    comm = build_comm(spec, peers, peers[me], store)
    try:
        result = run_rank(spec, comm, store)
    except (CollectiveError, StoreTimeout) as exc:
        comm.close(linger=0)
        result = {"rank": me, "error": str(exc), "error_at": time.time()}
    else:
        finish(comm, store, me, len(peers))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
