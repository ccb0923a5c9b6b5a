"""The specs' defaults are in one place: no host module reads a spec as a dict (`spec.get(key, default)`,
`spec[key]`), and every agent that the testbed gives a spec reads it with its spec class."""
import ast
import os

import pytest

import hosts

ROOT = os.path.dirname(hosts.__file__)
SPEC_NAMES = {"spec", "options", "beat"}       # what the host modules call a spec or a part of one
PART_NAMES = {"agents/flows.py": {"f"}}         # a flow, there (elsewhere `f` is a file or a failure)


def dict_reads(path: str, names: set[str] = frozenset()) -> list[str]:
    """`name.get(...)` and `name[...]` on a spec-like name (or self.spec) in a module, as 'line: code'."""
    tree = ast.parse(open(path).read(), path)
    found = []

    def spec_like(node) -> bool:
        return (isinstance(node, ast.Name) and node.id in SPEC_NAMES | names) or \
            (isinstance(node, ast.Attribute) and node.attr == "spec")

    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and spec_like(node.value) or \
                isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and spec_like(node.func.value):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def host_modules() -> list[str]:
    out = []
    for root, dirs, files in os.walk(ROOT):
        dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", "spec"))
        out += [os.path.relpath(os.path.join(root, f), ROOT) for f in sorted(files) if f.endswith(".py")]
    return out


@pytest.mark.parametrize("module", host_modules())
def test_no_host_module_reads_a_spec_as_a_dict(module):
    assert dict_reads(os.path.join(ROOT, module), PART_NAMES.get(module, set())) == []


def test_the_check_finds_dict_reads(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("def f(spec, self):\n    return spec.get('a', 1) + spec['b'] + self.spec.get('c')\n")
    assert len(dict_reads(str(path))) == 3


@pytest.mark.parametrize("agent,reader", [("collective_rank", "CollectiveRankSpec.load"),
                                          ("training_rank", "run_agent(TrainingRankSpec"),
                                          ("diloco_rank", "run_agent(DilocoRankSpec"),
                                          ("flows", "FlowsSpec.load"), ("probe", "ProbeSpec.from_argv"),
                                          ("tfdata_trainer", "TrainerSpec.from_json"),
                                          ("tfdata_service", "ServiceSpec.from_argv"),
                                          ("wan_transfer", "WanTransferSpec.load")])
def test_every_agent_reads_its_spec_with_its_class(agent, reader):
    assert reader in open(os.path.join(ROOT, "agents", f"{agent}.py")).read()
