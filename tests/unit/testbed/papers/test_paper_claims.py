"""`testbed paper`: verdicts against the paper's figure and its tolerance, the report, Table II cell by cell, and
bad input."""
import json
import subprocess
import sys

import pytest

from testbed import PROJECT_ROOT, papers
from testbed.papers import DIFFERS, NOT_RUN, PARTLY, REPRODUCED, Claim, rail_only, report


def claim(ours, paper=1.0, tolerance=0.1, **kw):
    return Claim("k", "a claim", paper, tolerance, "a set-up", ours, **kw)


@pytest.mark.parametrize("ours,verdict", [([1.05], REPRODUCED), ([0.9], REPRODUCED), ([1.15], PARTLY),
                                          ([0.8], PARTLY), ([1.25], DIFFERS), ([], NOT_RUN),
                                          ([0.7, 1.02, 1.3], REPRODUCED), ([1.3, 1.3, 0.99], DIFFERS)])
def test_the_verdict_is_the_median_against_the_tolerance(ours, verdict):
    assert claim(ours).verdict == verdict


def test_an_exact_claim_allows_nothing_and_a_zero_figure_is_absolute():
    assert claim([1536], paper=1536, tolerance=0.0).verdict == REPRODUCED
    assert claim([1537], paper=1536, tolerance=0.0).verdict == DIFFERS
    assert claim([0.04], paper=0.0, tolerance=0.05).verdict == REPRODUCED


def test_ours_reads_as_median_and_spread():
    assert claim([1.0, 1.2, 1.1]).ours_text() == "1.1 [1-1.2]"
    assert claim([196608]).ours_text() == "196608"
    assert claim([]).ours_text() == "-"


def test_table_ii_is_reproduced_cell_by_cell():
    cells = rail_only.table_ii()
    assert len(cells) == 6 * 6 and all(c.computed for c in cells)
    assert [c.key for c in cells if c.verdict != REPRODUCED] == []


def test_a_table_ii_cell_that_differs_says_so(monkeypatch):
    row = list(rail_only.TABLE_II[0])
    row[3] += 1                                     # the paper's rail-only switch count, one more
    monkeypatch.setattr(rail_only, "TABLE_II", (tuple(row),))
    verdicts = {c.key: c.verdict for c in rail_only.table_ii()}
    assert verdicts.pop("table2-32768-64-switches-rail-only") == DIFFERS
    assert set(verdicts.values()) == {REPRODUCED}


def test_the_report_has_every_claim_with_its_verdict(tmp_path):
    claims = [claim([1.02], paper=1.0), claim([1.5], paper=1.0, why="the machine was short of CPU"), claim([])]
    paths = report.write(rail_only, claims, True, str(tmp_path))
    doc = json.loads((tmp_path / "paper.json").read_text())
    assert [c["verdict"] for c in doc["claims"]] == [REPRODUCED, DIFFERS, NOT_RUN]
    assert doc["counts"] == {REPRODUCED: 1, PARTLY: 0, DIFFERS: 1, NOT_RUN: 1}
    md = (tmp_path / "paper.md").read_text()
    assert "**1 reproduced, 0 partly, 1 differ, 1 not run** of 3 claims" in md
    assert md.count("\n| a claim |") == 3 and "the machine was short of CPU" in md
    assert "<table>" in (tmp_path / "paper.html").read_text() and len(paths) == 3


def test_every_paper_module_has_what_the_command_needs():
    for name in papers.PAPERS:
        m = papers.module(name)
        assert m.NAME == name and m.TITLE and m.SOURCE and callable(m.claims)


def cli(*args):
    return subprocess.run([sys.executable, "-m", "testbed.cli", "paper", *args], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=60)


def test_the_command_lists_papers_and_refuses_unknown_ones():
    listed = cli("--list")
    assert listed.returncode == 0 and listed.stdout.startswith("rail-only ")
    unknown = cli("no-such-paper")
    assert unknown.returncode == 2 and "no paper named 'no-such-paper' (papers: rail-only" in unknown.stderr
    assert "Traceback" not in unknown.stderr
    nothing = cli()
    assert nothing.returncode == 2 and "name a paper, or --list" in nothing.stderr
