"""`testbed paper`: verdicts against the paper's figure and its tolerance, the report, Table II cell by cell, and
bad input."""
import json
import subprocess
import sys

import pytest

from testbed import PROJECT_ROOT, papers
from testbed.papers import AT_LEAST, AT_MOST, DIFFERS, NOT_RUN, PARTLY, REPRODUCED, Claim, rail_only, report


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


def diloco_rows(peak_ratio=0.5, ddp=2.0, streaming4=2.0 / 146):
    """A `diloco` run's rows as the paper module keeps them: bytes per inner step and sampled peaks."""
    def row(per_step, peak=0.0):
        return {"wan_bytes_per_step": per_step, "sampled_peak_wan_bytes": peak}
    return {("ddp", 0): row(ddp, ddp), ("diloco", 0): row(ddp / 4, 4 * ddp),
            ("diloco", 8): row(ddp / 16 + 0.001, ddp), ("streaming", 0): row(0.1875 * ddp, 4 * ddp * peak_ratio),
            ("streaming", 4): row(streaming4), "idle": 60.0}


def test_diloco_claims_from_its_runs():
    from testbed.papers import diloco
    claims = {c.key: c for c in diloco._claims_of([diloco_rows()], [diloco_rows()])}
    assert set(claims) == {"every-h", "peak-1-over-p", "quantised", "two-orders"}
    assert all(c.verdict == REPRODUCED for c in claims.values()), {k: (c.ours, c.verdict) for k, c in claims.items()}
    assert claims["two-orders"].ours == [pytest.approx(2.164, abs=1e-3)]      # log10(146)
    # a peak as big as DiLoCo's on the wire differs; ten times too little saving differs and says why
    claims = {c.key: c for c in diloco._claims_of([diloco_rows(peak_ratio=0.9)], [diloco_rows(streaming4=0.2)])}
    assert claims["peak-1-over-p"].verdict == DIFFERS
    assert claims["two-orders"].verdict == DIFFERS and "scales with H" in claims["two-orders"].why


def test_pccl_claims_from_its_runs():
    from testbed.papers import pccl
    pipe = {"wan_mbps": 5.0, "wan_payload_mbps": 4.7, "delay_us": 20000.0, "bdp_bytes": 25000.0, "size": 524288,
            "window": 6, "mtu": 1024, "idle": 50.0,
            "runs": {1: {"mbps": 1.0, "window_mbps": 1.02, "of_rate": 0.2}, 8: {"mbps": 4.5, "of_rate": 0.9}}}
    churn = {"failures": 4, "rejoins": 3, "steps_completed": 120, "divergence": {"divergent": 0}}
    claims = {c.key: c for c in pccl._claims_of([pipe], [churn], 45)}
    assert [claims[k].verdict for k in ("one-window-bound", "many-fill-the-pipe", "bit-parity")] == [REPRODUCED] * 3
    assert "4 failures and 3 rejoins" in claims["bit-parity"].config
    slow = {**pipe, "runs": {**pipe["runs"], 8: {"mbps": 3.0, "of_rate": 0.6}}}
    claims = {c.key: c for c in pccl._claims_of([slow], [{**churn, "divergence": {"divergent": 2}}], 45)}
    assert claims["many-fill-the-pipe"].verdict == DIFFERS and "0.94" in claims["many-fill-the-pipe"].why
    assert claims["bit-parity"].verdict == DIFFERS


def test_a_bound_claim_is_off_only_on_the_wrong_side():
    over = claim([0.9], paper=0.75, tolerance=0.0, bound=AT_LEAST)
    assert over.off == 0 and over.verdict == REPRODUCED
    assert claim([0.75], paper=0.75, tolerance=0.0, bound=AT_LEAST).verdict == REPRODUCED
    assert claim([0.6], paper=0.75, tolerance=0.0, bound=AT_LEAST).off == pytest.approx(0.2)
    assert claim([0.6], paper=0.75, tolerance=0.0, bound=AT_MOST).verdict == REPRODUCED
    md = report.markdown(rail_only, [over], True)
    assert "| >= 0.75 | 0.9 |" in md


def matrices(tp, pp, dp):
    """A training iteration's traffic: per phase, bytes sent a -> b, {(a, b): bytes} over 4 GPUs."""
    def m(d):
        return [[d.get((a, b), 0) for b in range(4)] for a in range(4)]
    total = {k: tp.get(k, 0) + pp.get(k, 0) + dp.get(k, 0) for k in {*tp, *pp, *dp}}
    return {"tp": m(tp), "pp": m(pp), "dp": m(dp), "bytes": m(total)}


def test_traffic_shares_come_from_the_measured_matrix():
    t = matrices({(0, 1): 300, (1, 0): 300}, {(1, 3): 100}, {(0, 2): 100})
    assert rail_only.tp_share(t) == pytest.approx(0.75)
    assert rail_only.idle_pairs(t) == pytest.approx(3 / 6)        # (0,1), (1,3), (0,2) busy of 6 pairs


def test_the_traffic_claims_measure_small_and_compute_the_papers_scale():
    tp_1t, idle_1t = rail_only.paper_scale()
    assert 0.75 < tp_1t < 1 and idle_1t == pytest.approx(1 - 14 / 3071, abs=1e-4)    # 7 TP + 5 DP + 2 PP peers
    t = matrices({(0, 1): 300, (1, 0): 300}, {(1, 3): 100}, {(0, 2): 600})
    claims = {c.key: c for c in rail_only.traffic_shares([t], "4 GPUs")}
    assert claims["traffic-tp-share-gpt-1t"].verdict == REPRODUCED and claims["traffic-tp-share-gpt-1t"].computed
    assert claims["traffic-idle-pairs-gpt-1t"].verdict == REPRODUCED
    assert claims["traffic-tp-share"].verdict == DIFFERS and "micro-batches" in claims["traffic-tp-share"].why
    assert claims["traffic-idle-pairs"].verdict == DIFFERS and "4 GPUs leave 50% of pairs idle" in \
        claims["traffic-idle-pairs"].why
