"""One rank of a DiLoCo run, inside an emulated GPU host, started by the testbed's `diloco` workload.

    python -m hosts.agents.diloco_rank SPEC.json

SPEC: a DilocoRankSpec as JSON (hosts/spec/rank.py: its fields, their meaning and defaults).

What the rank does, and what it prints: hosts/collectives/diloco_rank.py.
"""
from hosts.collectives.rank import run_agent
from hosts.collectives.diloco_rank import run_rank
from hosts.spec.rank import DilocoRankSpec


def main() -> None:
    run_agent(DilocoRankSpec, run_rank)


if __name__ == "__main__":
    main()
