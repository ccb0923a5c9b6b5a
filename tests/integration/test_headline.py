"""Integration (root): the README's headline figures, each measured once as `make bench` measures it
(benchmarks/measured.py) and held within 15% of the value published in docs/measured.json (of the worst of its
published repeats: one run is held against their spread, where make bench holds the median of its repeats).

A figure is held here when `make bench-quick` measures it (minutes, not hours) and it has been published by a run
of make bench; the others are held by `make bench`, which fails when one drops by more than 15%."""
import importlib.util
import os
import sys

import pytest

from tests.paths import ROOT

pytestmark = [pytest.mark.root, pytest.mark.alone, pytest.mark.slow, pytest.mark.headline]     # figures: they need the machine alone

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))        # the benchmarks' own modules, as measured.py runs them
spec = importlib.util.spec_from_file_location("measured", os.path.join(ROOT, "benchmarks", "measured.py"))
measured = sys.modules["measured"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(measured)

PUBLISHED = measured.load_published()
HELD = [f for f in measured.FIGURES if f.quick and f.held and "values" in PUBLISHED[f.key]]


def test_the_quick_figures_are_published_by_make_bench():
    """Every figure of make bench-quick that holds a number has been measured by it, not only by hand."""
    missing = [f.key for f in measured.FIGURES if f.quick and f.held and "values" not in PUBLISHED[f.key]]
    assert not missing, f"run make bench-quick: {missing} are not published by it"


@pytest.mark.parametrize("fig", HELD, ids=[f.key for f in HELD])
def test_a_headline_figure_holds_within_15_percent_of_its_published_value(fig):
    # One run against the worst of the published repeats: a figure whose repeats spread is held at its spread's
    # edge. A run that misses is measured twice more and the median of the three is held (a moment of load on a
    # shared machine can cost one run a millisecond figure; a regression costs all three).
    new = {"values": {}}

    def measure() -> list[str]:
        for k, v in fig.measure().items():
            new["values"].setdefault(k, []).append(float(v))
        print(f"{fig.key}: {measured.figure_text(fig, new)} (published: {measured.figure_text(fig, PUBLISHED[fig.key])})")
        return measured.worse(fig, PUBLISHED[fig.key], new, against="worst")

    missed = measure()
    if missed:
        measure()
        missed = measure()
    assert not missed, missed
