"""`testbed clean`: remove what runs of the testbed left behind, and nothing else."""
from __future__ import annotations


def cmd_clean(args) -> int:
    from testbed import clean
    removed = clean.clean()
    print("removed: " + ", ".join(f"{v} {k}" for k, v in removed.items()))
    return 0


def register(subparsers) -> None:
    c = subparsers.add_parser("clean", help="remove everything the testbed left behind")
    c.set_defaults(func=cmd_clean)
