"""Several ranks of one collective job in one process: a thread per rank, each in its own GPU host's network
namespace, run by the testbed's launcher when a job asks for `ranks_per_process` above 1.

    python -m hosts.agents.rank_host NETNS SPEC.json [NETNS SPEC.json ...]

NETNS: the rank's network namespace (/proc/PID/ns/net of a process of its host); SPEC: its CollectiveRankSpec,
as for hosts/agents/collective_rank.py. Each rank's thread enters its namespace before it opens anything, and
what it starts (its devices' engines, its heartbeats) inherits it: every socket a rank opens is its host's, as
in a process of its own. The ranks share the process's interpreter: a large job starts on less CPU, but its
threads take turns at the interpreter's lock, so its timings are not those of a process per rank
(docs/capacity.md).

GPU faults signal a rank's process (testbed/faults/signals.py), so ranks that share one take none: the testbed
refuses the combination. Each rank reports its share of the process's CPU per measured step (the process's over
the ranks it runs). Prints {"ranks": [each rank's result, as collective_rank prints it, in argument order]}.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import traceback

from hosts.agents import collective_rank
from hosts.rdma.netns import enter_netns
from hosts.spec.rank import CollectiveRankSpec


def run_rank(netns: str, spec: CollectiveRankSpec, share: int) -> dict:
    """One rank in the calling thread, moved into `netns` for good (the thread ends with the rank)."""
    try:
        enter_netns(netns)
        return collective_rank.run(spec, signals=False, cpu_share=share)
    except Exception as exc:         # one rank's failure is its result; its neighbours in the process go on
        where = traceback.extract_tb(exc.__traceback__)[-1]
        return {"rank": spec.rank, "host": spec.peers[spec.rank].name, "recoveries": [], "lost_steps": 0,
                "error": f"{type(exc).__name__}: {exc} ({os.path.basename(where.filename)}:{where.lineno})"}


def main(argv: list[str]) -> None:
    if not argv or len(argv) % 2:
        raise SystemExit("usage: rank_host NETNS SPEC.json [NETNS SPEC.json ...]")
    pairs = [(argv[i], CollectiveRankSpec.load(argv[i + 1])) for i in range(0, len(argv), 2)]
    results: list[dict | None] = [None] * len(pairs)

    def run(i: int) -> None:
        results[i] = run_rank(pairs[i][0], pairs[i][1], len(pairs))

    threads = [threading.Thread(target=run, args=(i,), name=f"tb-rank{spec.rank}") for i, (_, spec) in enumerate(pairs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"ranks": results}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
