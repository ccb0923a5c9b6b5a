"""The launcher checks every agent's result line against its schema (hosts/spec/results.py): a line that does
not fit is the host's error, naming the key; a user's program (no schema) is not checked."""
from hosts.spec.results import PROBE
from testbed.runtime import agent_results
from testbed.runtime.launch import run_on_hosts
from tests.unit.testbed.runtime.test_launch_stragglers import Net


def test_a_fitting_result_has_no_problem_and_an_unknown_program_is_not_checked():
    assert agent_results.problem("hosts.agents.probe", {"reached": ["10.11.0.2"], "unreached": []}) is None
    assert agent_results.problem("mpirun", {"anything": 1}) is None


def test_problems_name_the_key():
    assert agent_results.problem("hosts.agents.probe", {"reached": [1], "unreached": []}).startswith("reached[0]: ")
    assert "'extra'" in agent_results.problem("hosts.agents.probe", {"reached": [], "unreached": [], "extra": 1})
    bad = {"received": [], "sent": [{"flow": 1, "bytes": "8", "seconds": 1.0}]}
    assert agent_results.problem("hosts.agents.flows", bad).startswith("sent[0]")


def test_the_launcher_reports_a_result_its_schema_rejects(tmp_path, monkeypatch):
    monkeypatch.setitem(agent_results.RESULTS, "tb_done", PROBE)       # tb_done prints {"ok": 1}
    out, errors = run_on_hosts(Net(tmp_path), {"a": ["tb_done"], "b": ["tb_slow"]}, timeout=60, partial=True)
    assert out == {"b": {"ok": 3}}
    assert len(errors) == 1 and errors[0].startswith("a: tb_done printed a result its schema rejects: ")
