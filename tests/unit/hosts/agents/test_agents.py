"""The programs that run in hosts live in hosts/agents (each a `python -m` module with a main), and the
libraries beside them are libraries only."""
import ast
import importlib
import os
import pkgutil

import pytest

import hosts
import hosts.agents

AGENTS = ["collective_rank", "training_rank", "probe", "flows", "tfdata_service", "tfdata_trainer", "fuzz",
          "beat_watch", "diloco_rank", "wan_transfer", "roce_flows", "rank_host"]


def _has_main_guard(path: str) -> bool:
    tree = ast.parse(open(path).read())
    return any(isinstance(n, ast.If) and isinstance(n.test, ast.Compare) and isinstance(n.test.left, ast.Name)
               and n.test.left.id == "__name__" for n in tree.body)


@pytest.mark.parametrize("name", AGENTS)
def test_every_agent_is_a_program(name):
    mod = importlib.import_module(f"hosts.agents.{name}")
    assert callable(mod.main)
    assert _has_main_guard(mod.__file__)
    assert f"python -m hosts.agents.{name}" in mod.__doc__


def test_no_other_program_among_the_agents():
    assert sorted(m.name for m in pkgutil.iter_modules(hosts.agents.__path__)) == sorted(AGENTS)


@pytest.mark.parametrize("package", ["collectives", "tfdata"])
def test_libraries_have_no_program(package):
    root = os.path.join(os.path.dirname(hosts.__file__), package)
    programs = [f for f in sorted(os.listdir(root)) if f.endswith(".py") and _has_main_guard(os.path.join(root, f))]
    assert programs == []
