"""Background RoCE traffic on one host, run by the testbed's `traffic` workload (protocol roce).

    python -m hosts.agents.roce_flows SPEC.json

SPEC: a RoceFlowsRankSpec (hosts/spec/rank.py). Each host is a rank of the traffic's communicator; its flows are
RC SENDs (RoCEv2, UDP port 4791) to its destinations, paced by the queue pairs (its offered load, shared by the
peers it sends to) and, with `congestion`, slowed by DCQCN or the delay-based control. The queue pairs connect
before `start_at`, so a flow's time is its transfer alone. A flow's payload is drawn from a seed (its number):
the receiver checks every byte. Prints {"rank", "host", "received": [{"flow", "bytes", "seconds", "correct"}],
"sent": [{"flow", "retransmits", "timeouts"}], "counters"} or {"rank", "error"}.
"""
from __future__ import annotations

import time

import numpy as np

from hosts.collectives.comm import Message
from hosts.collectives.rank import run_agent
from hosts.spec.rank import RoceFlowsRankSpec


def payload(flow: int, size: int) -> np.ndarray:
    """A flow's bytes, the same at both ends: drawn from its number."""
    return np.random.default_rng(flow).integers(0, 256, size, dtype=np.uint8)


def run_rank(spec: RoceFlowsRankSpec, comm, store) -> dict:
    comm.op = "traffic"
    for peer in sorted({f.peer for f in spec.sends + spec.recvs}):      # connect first (ascending: no deadlock)
        comm.channel(peer)
    buffers = {f.flow: np.zeros(f.bytes, dtype=np.uint8) for f in spec.recvs}
    sends = [(f.peer, payload(f.flow, f.bytes)) for f in spec.sends]
    done: dict[int, float] = {}
    recvs = [(f.peer, buffers[f.flow], lambda n=f.flow: done.setdefault(n, time.time())) for f in spec.recvs]
    time.sleep(max(0.0, spec.start_at - time.time()))
    comm.stream([(peer, Message(arr)) for peer, arr in sends], recvs)
    received = []
    for f in spec.recvs:
        seconds = done[f.flow] - spec.start_at
        received.append({"flow": f.flow, "bytes": f.bytes, "seconds": round(seconds, 4),
                         "mbps": f.bytes * 8 / seconds / 1e6 if seconds > 0 else None,
                         "correct": bool(np.array_equal(buffers[f.flow], payload(f.flow, f.bytes)))})
    sent = []
    for f in spec.sends:
        qps = comm.channels[f.peer].qps
        sent.append({"flow": f.flow, **{k: sum(q.counters.get(k, 0) for q in qps)
                                        for k in ("retransmits", "timeouts", "cc_rate_cuts")}})
    return {"rank": spec.rank, "host": spec.peers[spec.rank].name, "received": received, "sent": sent,
            "counters": comm.counters()}


def main() -> None:
    run_agent(RoceFlowsRankSpec, run_rank)


if __name__ == "__main__":
    main()
