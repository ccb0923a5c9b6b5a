"""-q, -v and --debug: before the verb and after `run`; --debug turns an unexpected error's one line into its
traceback; -q with -v is refused as bad input."""
import logging
import types

import pytest

import testbed.cli as cli
from testbed.cli import verbosity
from testbed.runtime.progress import DEBUG, NORMAL, QUIET, VERBOSE


@pytest.mark.parametrize("argv,level", [
    (["run", "x.yaml"], NORMAL),
    (["run", "-q", "x.yaml"], QUIET),
    (["-q", "run", "x.yaml"], QUIET),
    (["run", "x.yaml", "--quiet"], QUIET),
    (["run", "-v", "x.yaml"], VERBOSE),
    (["-v", "run", "x.yaml"], VERBOSE),
    (["--debug", "run", "x.yaml"], DEBUG),
    (["run", "--debug", "x.yaml", "--set", "a=1"], DEBUG),
    (["-q", "topo", "clos", "--servers", "2", "--gpus", "2"], QUIET),
])
def test_the_flags_parse_before_the_verb_and_after_run(argv, level):
    args = cli.parser().parse_args(argv)
    assert verbosity.level(args) == level


def a_verb_that_raises(exc):
    def register(sub):
        p = sub.add_parser("boom")
        p.set_defaults(func=lambda args: (_ for _ in ()).throw(exc))
    return types.SimpleNamespace(register=register)


def test_debug_shows_the_traceback_where_the_default_shows_one_line(monkeypatch, capsys):
    monkeypatch.setattr(cli, "VERBS", cli.VERBS + (a_verb_that_raises(RuntimeError("the controller exited")),))
    assert cli.main(["boom"]) == 1
    err = capsys.readouterr().err
    assert err == "testbed boom: error: RuntimeError: the controller exited\n"
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])                # basicConfig configures a fresh root logger
    monkeypatch.setattr(root, "level", root.level)
    assert cli.main(["--debug", "boom"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):") and "RuntimeError: the controller exited\n" in err
    assert err.endswith("testbed boom: error: RuntimeError: the controller exited\n")
    assert root.level == logging.DEBUG


def test_quiet_with_verbose_is_bad_input(monkeypatch, capsys):
    monkeypatch.setattr(cli, "VERBS", cli.VERBS + (a_verb_that_raises(AssertionError("not reached")),))
    assert cli.main(["-q", "boom", ]) == 1                   # quiet alone: the verb runs
    capsys.readouterr()
    for argv in (["-q", "-v", "boom"], ["-q", "run", "-v", "x.yaml"], ["run", "-q", "--debug", "x.yaml"]):
        assert cli.main(argv) == 2
        assert "-q contradicts -v and --debug" in capsys.readouterr().err
