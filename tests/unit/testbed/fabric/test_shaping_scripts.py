"""The switch ports' shaping commands run as shell scripts that each fit one argument (MAX_ARG_STRLEN, 128 KiB):
a 64-GPU fabric's ports at once did not (its bring-up is held by tests/integration/test_headline.py)."""
from testbed.fabric.network import ARG_MAX_BYTES, scripts_of


def test_lines_are_split_into_scripts_that_fit_and_keep_their_order():
    lines = [f"echo {i:05d} " + "x" * 90 for i in range(3000)]
    scripts = scripts_of(lines)
    assert len(scripts) > 1 and all(len(s.encode()) <= ARG_MAX_BYTES for s in scripts)
    assert "\n".join(scripts).split("\n") == lines


def test_a_line_longer_than_the_limit_is_a_script_of_its_own_and_nothing_is_empty():
    assert scripts_of(["a" * 10, "b" * 100, "c"], limit=50) == ["a" * 10, "b" * 100, "c"]
    assert scripts_of([]) == []

