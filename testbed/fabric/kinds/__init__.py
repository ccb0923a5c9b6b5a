"""The fabric kinds, declared once: adding one is a module here (a FabricKind subclass) and a line in ALL.

Nothing outside this package compares a kind's name; code asks the kind (`fabric.design`, or `get(name)`).
"""
from __future__ import annotations

from testbed.fabric.kinds.base import FabricKind
from testbed.fabric.kinds.clos import CLOS
from testbed.fabric.kinds.rail_only import RAIL_ONLY
from testbed.fabric.kinds.rail_optimized import RAIL_OPTIMIZED

ALL: tuple[FabricKind, ...] = (RAIL_ONLY, RAIL_OPTIMIZED, CLOS)
NAMES = tuple(k.name for k in ALL)
BY_NAME = {k.name: k for k in ALL}


class UnknownKind(ValueError):
    """A name that is no fabric kind; the message lists the kinds."""


def get(name) -> FabricKind:
    try:
        return BY_NAME[name]
    except (KeyError, TypeError):
        raise UnknownKind(f"unknown fabric kind {name!r}; choose one of {', '.join(NAMES)}") from None


def described() -> str:
    """The kinds in a sentence: 'a (...), b (...), or c (...)'."""
    parts = [f"{k.name} ({k.summary})" for k in ALL]
    return ", ".join(parts[:-1]) + ", or " + parts[-1]
