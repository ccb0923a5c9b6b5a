"""make bench's publication (benchmarks/measured.py): the README's Measured table and docs/measured.md are what
docs/measured.json renders to, every figure is accounted for, and a figure that got worse is caught."""
import importlib.util
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
spec = importlib.util.spec_from_file_location("measured", os.path.join(ROOT, "benchmarks", "measured.py"))
measured = sys.modules["measured"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(measured)


@pytest.fixture(scope="module")
def published():
    return measured.load_published()


def test_the_readme_table_is_what_measured_json_renders_to(published):
    with open(measured.README_PATH) as f:
        readme = f.read()
    assert readme.count(measured.BEGIN) == 1 and readme.count(measured.END) == 1
    assert measured.readme_with(measured.readme_table(published), readme) == readme, \
        "README's Measured table differs from docs/measured.json: run benchmarks/measured.py --render"


def test_measured_md_is_what_measured_json_renders_to(published):
    with open(measured.MD_PATH) as f:
        assert f.read() == measured.measured_md(published), "run benchmarks/measured.py --render"


def test_every_figure_is_published_and_measured_or_named_by_its_command(published):
    keys = [f.key for f in measured.FIGURES]
    assert len(set(keys)) == len(keys)
    assert set(published) == set(keys)
    for fig in measured.FIGURES:
        assert bool(fig.measure) != bool(fig.by_hand), fig.key        # one way to obtain it, named
        if fig.measure:
            assert fig.render and fig.config, fig.key
        entry = published[fig.key]
        if "values" in entry:
            assert fig.measure and set(entry["values"]) >= set(fig.held), fig.key
            assert entry["commit"] and entry["date"] and entry["machine"]
            assert measured.figure_text(fig, entry)                   # renders from its own numbers
        else:
            assert entry["text"], fig.key


def test_a_figure_renders_median_and_spread():
    s = measured.Stat([0.95, 0.97, 0.96])
    assert s() == "0.96 [0.95-0.97]" and measured.Stat([1.0, 1.001])(2) == "1.00"


def entry(**values):
    return {"values": {k: list(v) for k, v in values.items()}}


@pytest.mark.parametrize("better, was, now, flagged", [
    ("higher", [0.96, 0.95, 0.97], [0.80, 0.81, 0.79], True),     # 16% lower
    ("higher", [0.96, 0.95, 0.97], [0.85, 0.84, 0.86], False),    # 11%
    ("higher", [0.96], [1.20], False),                            # better is never flagged
    ("lower", [1.0, 1.0, 1.0], [1.2, 1.2, 1.2], True),            # 20% slower
    ("lower", [1.0], [0.5], False),
    ("higher", [0, 0, 0], [0, 0, 0], False),                      # a published 0 (a capacity under the first rate)
    ("higher", [0, 0, 0], [40, 40, 40], False),                   # is nothing to be a fraction of
])
def test_a_held_number_more_than_15_percent_worse_is_caught(better, was, now, flagged):
    fig = measured.Figure("x", "x", "x", held={"a": better})
    assert bool(measured.worse(fig, entry(a=was), entry(a=now))) == flagged


def test_one_run_is_held_against_the_worst_published_repeat():
    fig = measured.Figure("x", "x", "x", held={"t": "lower"})
    published = entry(t=[1.0, 1.1, 1.5])
    assert measured.worse(fig, published, entry(t=[1.6]))                       # 45% above the median
    assert not measured.worse(fig, published, entry(t=[1.6]), against="worst")  # 7% above the worst repeat
    assert measured.worse(fig, published, entry(t=[1.8]), against="worst")


def test_a_figure_first_measured_has_nothing_to_be_worse_than():
    fig = measured.Figure("x", "x", "x", held={"a": "higher"})
    assert measured.worse(fig, {"text": "by hand"}, entry(a=[0.1])) == []


def test_bad_arguments_are_refused_by_name(capsys):
    for argv, words in ((["--only", "nonsense"], "nonsense"), (["--repeats", "0"], "repeats")):
        with pytest.raises(SystemExit) as e:
            measured.main(argv)
        assert words in str(e.value)


def test_a_computed_figure_is_measured_and_published(tmp_path, monkeypatch):
    """The planner's figure needs no fabric: measuring it end to end writes its numbers and renders them."""
    for name in ("JSON_PATH", "MD_PATH", "README_PATH"):
        src = getattr(measured, name)
        dst = tmp_path / os.path.basename(src)
        dst.write_text(open(src).read())
        monkeypatch.setattr(measured, name, str(dst))
    assert measured.main(["--only", "planner"]) == 0
    entry = json.loads((tmp_path / "measured.json").read_text())["planner"]
    assert entry["values"]["rail_only_switches"] == [256] and entry["values"]["rail_optimized_switches"] == [1280]
    assert "rail-only 256 vs 1280 switches" in (tmp_path / "README.md").read_text()
    assert "commit" in (tmp_path / "measured.md").read_text()


def test_a_figure_whose_benchmark_exits_is_reported_and_the_others_still_run(monkeypatch, capsys):
    """The benchmark scripts end a failed case with SystemExit; make bench reports it as that figure's failure."""
    def exits():
        raise SystemExit("2x4 allgather/multicast failed")
    ran = []
    monkeypatch.setitem(measured.BY_KEY, "a", measured.Figure("a", "a", "a", "a", exits, lambda s: ""))
    monkeypatch.setitem(measured.BY_KEY, "b", measured.Figure("b", "b", "b", "b", lambda: ran.append(1) or {"x": 1},
                                                              lambda s: f"x {s['x']()}"))
    assert measured.main(["--only", "a,b", "--dry-run", "--repeats", "1"]) == 1
    assert ran == [1] and "a FAILED: 2x4 allgather/multicast failed" in capsys.readouterr().out


def stats(**values):
    return {k: measured.Stat([v]) for k, v in values.items()}


def test_the_new_figures_render_every_number_they_measure():
    """Each render names its numbers as its measure() returns them (a typo would only show after an hour's run)."""
    h = stats(allreduce=0.96, allgather=0.98, allreduce_pipelined=1.53, allgather_pipelined=1.51)
    assert measured.hierarchical_text(h) == "AllReduce 0.96 / AllGather 0.98; pipelined 1.53 / 1.51 of the sequential bound"
    m = stats(**{f"{g}_{k}": v for g in measured.MULTICAST_GRIDS for k, v in (
        ("time", 0.97), ("multicast_s", 1.49), ("ring_s", 1.53), ("links_vs_rail", 1.16), ("links_vs_rank", 1.45),
        ("network_vs_rail", 0.9), ("trees", 1.0))})
    assert "0.97 / 0.97 of the faster ring's time (1.49 vs 1.53 s / 1.49 vs 1.53 s)" in measured.multicast_text(m)
    assert "the rail-aware ring moves 0.90 / 0.90x multicast's" in measured.multicast_text(m)
    t = stats(**{f"{f}_{k}": v for f in measured.TRAINING_FABRICS
                 for k, v in (("s", 19.6), ("predicted_s", 20.0), ("pp", 0.66), ("tp", 0.85), ("bubble", 0.9), ("dp", 1.04))})
    assert measured.training_text(t) == ("19.60 / 19.60 / 19.60 s vs 20.00 / 20.00 / 20.00 s predicted; per phase, "
                                         "measured / model: PP 0.66 / 0.66 / 0.66, TP 0.85 / 0.85 / 0.85, "
                                         "bubble 0.90 / 0.90 / 0.90, DP 1.04 / 1.04 / 1.04")
    p = stats(**{f"{n}_{r}": 0.9 for n in measured.PEER_NAMES for r in measured.PEER_RATES})
    assert measured.peers_text(p).startswith("10 Mbit/s: ours 0.90, Open MPI tuned 0.90 (as installed 0.90), gloo 0.90, TF 0.90; 50")
    for key, numbers in (("gpu_stall", stats(stall_detected_s=2.2, stall_reformed_s=2.6, cut_detected_s=0.9,
                                             cut_reformed_s=1.6)),
                         ("early_exit", stats(detected_s=0.02, wall_s=9.0)),
                         ("delay_line", stats(rtt_1ms=2.2, rtt_5ms=10.2, rtt_20ms=40.3, cpu_us_1000pps=82,
                                              cpu_us_5000pps=29)),
                         ("fastflow", stats(steps_per_s=11.9, vs_no=2.99, vs_best=1.04, epoch_vs_no=2.47,
                                            best_epoch_vs_no=2.86, off_ratio=0.67)),
                         ("machines", stats(**{f"{n}_{k}": 1.0 for n in ("one", "two")
                                               for k in ("bring_up_s", "ring", "hierarchical")})),
                         ("liveness", stats(on_false_pairs=0, on_max_silence_s=0.61, on_detected_s=0.92,
                                            off_false_pairs=3, off_max_silence_s=1.9, off_detected_s=1.0)),
                         ("churn", stats(failures=31, rejoins=31, steps=5403, lost=22, recovery_s=60.2)),
                         ("soak", stats(runs=100, ovs_vswitchd_rss_mib=0.0, ovs_vswitchd_fds=0)),
                         ("diloco_rejoin", stats(left_s=10.3, back_s=4.1, alone_steps=2, outer_steps=6, bit_equal=1,
                                                 resync_bytes=524288))):
        fig = measured.BY_KEY[key]
        assert set(fig.held) <= set(numbers) and fig.render(numbers), key


def test_a_library_left_out_is_left_out_of_the_side_by_side():
    p = stats(ours_10=0.96, gloo_10=0.99, ours_50=0.95, gloo_50=1.0)
    assert measured.peers_text(p) == "10 Mbit/s: ours 0.96, gloo 0.99; 50 Mbit/s: ours 0.95, gloo 1.00"


def test_multicast_is_compared_with_each_ring_round_by_round():
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import multicast_allgather as bench

    def row(name, rnd, seconds, links, network):
        return {"grid": "2x4", "bytes": 1 << 20, "name": name, "round": rnd, "seconds": seconds,
                "links_per_op": links, "network_per_op": network}
    rows = [row("ring-rank", 0, 2.0, 30, 10), row("ring-rail", 0, 1.5, 24, 8), row("multicast", 0, 1.2, 20, 10),
            row("ring-rank", 1, 1.0, 30, 10), row("ring-rail", 1, 3.0, 24, 8), row("multicast", 1, 2.0, 20, 10)]
    c = bench.compare(rows)[("2x4", 1 << 20)]
    assert c["links"] == {"ring-rank": [1.5, 1.5], "ring-rail": [1.2, 1.2]}
    assert c["network"]["ring-rail"] == [0.8, 0.8]                  # below 1: the ring moves fewer
    assert c["time"] == [1.2 / 1.5, 2.0 / 1.0]                      # against the faster ring of the same round
    assert bench.compare([r for r in rows if r["name"] != "multicast"]) == {}


def test_capacity_below_the_first_rate_tried_says_so():
    s = stats(**{f"{g}x{p}_mbps": v for (g, p), v in zip(measured.CAPACITY_GRIDS, (40, 20, 0))})
    assert measured.capacity_text(s) == "40 / 20 / under 5 Mbit/s with the default frames (RoCE MTU 4096 on NICs, " \
                                        "32 KiB on HB links)"


def test_the_soak_names_only_the_daemons_that_ran():
    s = stats(runs=100, ovs_vswitchd_rss_mib=0.3, ovs_vswitchd_fds=0, dockerd_rss_mib=0.7, dockerd_fds=2)
    assert measured.soak_text(s) == ("100 runs, all exit 0, nothing left behind; grown by: ovs-vswitchd 0.3 MiB, "
                                     "0 open files; dockerd 0.7 MiB, 2 open files")


VM_TEST_OUTPUT = """=== vm-test: box (scripts/vm-box)
...
=== vm-test summary (software emulation, TCG)
[PASS] box (scripts/vm-box)              150 s
[PASS] wheels                             12 s
[PASS] vagrant up (boot)                 210 s
[PASS] provisioning                      480 s
[PASS] checks in the VM                 1140 s
[DONE] tear-down                          20 s
--- inside the VM:
[PASS] kernel OVS
[PASS] rxe in every host
[PASS] offload on cgroup v2
vm-test: PASS in 2012 s
"""


def test_the_vm_figure_is_read_from_what_vm_test_prints(monkeypatch):
    monkeypatch.setattr(measured.subprocess, "run",
                        lambda *a, **k: measured.subprocess.CompletedProcess(a, 0, VM_TEST_OUTPUT, ""))
    numbers = measured.vm_test()
    assert numbers == pytest.approx({"total_min": 2012 / 60, "checks_passed": 3, "box_min": 2.5, "boot_min": 3.5,
                                     "provisioning_min": 8.0, "checks_min": 19.0})
    text = measured.BY_KEY["vm"].render(stats(**numbers))
    assert text.startswith("PASS in 34 min (box 2.5, boot 3.5, provisioning 8.0, checks 19.0 min); 3 checks inside")
    failed = VM_TEST_OUTPUT.replace("[PASS] rxe", "[FAIL] rxe").replace("vm-test: PASS", "vm-test: FAIL")
    monkeypatch.setattr(measured.subprocess, "run",
                        lambda *a, **k: measured.subprocess.CompletedProcess(a, 1, failed, ""))
    with pytest.raises(RuntimeError, match="rxe in every host"):
        measured.vm_test()
