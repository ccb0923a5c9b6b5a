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
    for argv, words in ((["--only", "nonsense"], "nonsense"), (["--only", "vm"], "vm"), (["--repeats", "0"], "repeats")):
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
