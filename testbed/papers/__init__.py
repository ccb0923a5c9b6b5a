"""`testbed paper NAME`: a seed paper's claims run on the testbed, each set beside the paper's own figure.

A paper module (one per paper) has NAME, TITLE, SOURCE (where the claims come from) and
`claims(quick, out_dir, echo) -> list[Claim]`, which runs what it needs (computed claims run nothing) and returns
one Claim per figure of the paper it reproduces; optionally `missing() -> str`, what the machine lacks to run it
(an optional extra), which the command refuses with before bring-up. testbed/papers/report.py writes the report.
"""
from __future__ import annotations

import importlib
import statistics
from dataclasses import dataclass, field

# name -> module; `testbed paper --list` shows them in this order
PAPERS = {"rail-only": "testbed.papers.rail_only", "spcl-multicast": "testbed.papers.spcl_multicast",
          "apnet": "testbed.papers.apnet", "spraying": "testbed.papers.spraying", "diloco": "testbed.papers.diloco",
          "pccl": "testbed.papers.pccl",
          "fastflow": "testbed.papers.fastflow"}

REPRODUCED, PARTLY, DIFFERS, NOT_RUN = "reproduced", "partly", "differs", "not run"
AT_LEAST, AT_MOST = "at least", "at most"


def short_of_cpu(least_idle_pct: float | None) -> str:
    """Why a figure may not be the fabric's: its runs went under the fidelity guard's CPU idle ('' if not)."""
    from testbed.monitor.fidelity import CPU_BOUND_IDLE_PCT
    if least_idle_pct is None or least_idle_pct >= CPU_BOUND_IDLE_PCT:
        return ""
    return (f"the machine was short of CPU in its runs (down to {least_idle_pct:.0f}% idle): the figure may measure "
            "the machine, not the fabric")


class PaperError(Exception):
    """Bad input to `testbed paper` (an unknown paper): one line."""


def module(name: str):
    if name not in PAPERS:
        raise PaperError(f"no paper named {name!r} (papers: {', '.join(PAPERS)})")
    return importlib.import_module(PAPERS[name])


@dataclass
class Claim:
    """One figure of a paper beside ours. `paper` is the paper's value; `ours` our measurements (one per repeat;
    empty when not run); `tolerance` how far (relative to the paper's value) ours may be and still reproduce it.
    A `bound` claim ("over 75%": AT_LEAST, "under": AT_MOST) is off only by how far ours falls on the wrong side."""
    key: str
    what: str                   # the claim, in the paper's terms
    paper: float
    tolerance: float
    config: str                 # our set-up, in words
    ours: list[float] = field(default_factory=list)
    unit: str = ""
    computed: bool = False      # from the testbed's models (the planner), not from a run
    why: str = ""               # where ours differs, the reason (or why it was not run)
    bound: str = ""             # "", AT_LEAST or AT_MOST

    @property
    def median(self) -> float | None:
        return statistics.median(self.ours) if self.ours else None

    @property
    def off(self) -> float | None:
        """How far our median is from the paper's value, relative to it."""
        if self.median is None:
            return None
        holds = {AT_LEAST: self.median >= self.paper, AT_MOST: self.median <= self.paper}
        if holds.get(self.bound):
            return 0.0
        return abs(self.median - self.paper) / abs(self.paper) if self.paper else abs(self.median)

    @property
    def verdict(self) -> str:
        """reproduced: within the tolerance; partly: within twice it; differs: beyond."""
        if self.off is None:
            return NOT_RUN
        if self.off <= self.tolerance + 1e-9:
            return REPRODUCED
        return PARTLY if self.off <= 2 * self.tolerance + 1e-9 else DIFFERS

    def ours_text(self) -> str:
        """Our median [min-max] (the median alone when every repeat agrees); '-' when not run."""
        if not self.ours:
            return "-"
        if len(self.ours) == 1 or min(self.ours) == max(self.ours):
            return number(self.median)
        return f"{number(self.median)} [{number(min(self.ours))}-{number(max(self.ours))}]"


def number(v: float) -> str:
    """Counts as counts (196608), measurements to 3 significant digits (1.18)."""
    return f"{int(v)}" if float(v).is_integer() else f"{v:.3g}"
