"""One rank of a training iteration, run inside an emulated GPU host by the testbed's `training_iteration` workload.

    python -m hosts.agents.training_rank SPEC.json

SPEC: {"rank", "peers", "store",                        (as for collective_rank; rank = GPU order)
       "plan": {"tp", "pp", "dp"}, "micro_batches": m, "schedule": "1f1b" | "gpipe",
       "layers": layers of this stage, "recompute": true,
       "activation_count": elements of one micro-batch's activations (b s h, scaled),
       "gradient_count": elements of this rank's gradients (params / (p t), scaled), "dtype": "float16",
       "compute_s": emulated GPU time of one micro-batch (forward, recomputation and backward),
       "tp_algo": "ring", "dp_algo": "ring" | "hierarchical", "iterations": 1, "check": true,
       "timeout_s", "chunk", "rate_limit_bps", "sport_mode", "split", "rc_timeout"}  (transport, as for collective_rank)

What the rank does, and what it prints: hosts/collectives/training.py.
"""
from __future__ import annotations

import json
import sys
import time

from hosts.collectives.comm import CollectiveError, Peer
from hosts.collectives.rank import build_comm, finish
from hosts.collectives.store import FileStore, StoreTimeout
from hosts.collectives.training import run_rank


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    peers = [Peer(**p) for p in spec["peers"]]
    me = spec["rank"]
    store = FileStore(spec["store"], timeout=spec.get("timeout_s", 60))
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
