"""One rank of a training iteration, run inside an emulated GPU host by the testbed's `training_iteration` workload.

    python -m hosts.agents.training_rank SPEC.json

SPEC: a TrainingRankSpec as JSON (hosts/spec/rank.py: its fields, their meaning and defaults).

What the rank does, and what it prints: hosts/collectives/training.py.
"""
from hosts.collectives.rank import run_agent
from hosts.collectives.training import run_rank
from hosts.spec.rank import TrainingRankSpec


def main() -> None:
    run_agent(TrainingRankSpec, run_rank)


if __name__ == "__main__":
    main()
