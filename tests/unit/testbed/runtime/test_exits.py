"""The launcher tells a job of a rank process that ended without its result, the moment it ends, in the job's
news; a rank that printed its result is not reported. Local processes stand in for the emulated hosts."""
import json
import os
import time

from hosts.collectives.rank import news_dir
from hosts.recovery.heartbeat import LAUNCHER, NEWS
from testbed.runtime import exits
from testbed.runtime.launch import run_on_hosts
from tests.unit.testbed.runtime.test_launch_stragglers import Net

KILLED = "import os, signal, time; time.sleep(0.3); os.kill(os.getpid(), signal.SIGKILL)"


def launcher_news(store):
    with open(os.path.join(news_dir(store), NEWS.format(name=LAUNCHER))) as f:
        return json.load(f)


def test_a_killed_rank_is_reported_as_it_ends_and_a_finished_one_is_not(tmp_path):
    store = str(tmp_path / "store")
    net = Net(tmp_path)
    (tmp_path / "tb_killed.py").write_text(KILLED + "\n")
    t = time.time()
    out, errors = run_on_hosts(net, {"a": ["tb_done"], "b": ["tb_killed"], "c": ["tb_slow"]}, timeout=60,
                               partial=True, on_exit=exits.reporter(store))
    assert out == {"a": {"ok": 1}, "c": {"ok": 3}} and len(errors) == 1
    news = launcher_news(store)
    assert set(news) == {"b"}
    assert news["b"]["by"] == "exit" and news["b"]["why"] == "ended: was killed: no output"
    assert t + 0.3 <= news["b"]["at"] < t + 1.5       # when it died, not when the slowest process ended


def test_has_result_reads_the_last_line():
    assert exits.has_result('noise\n{"rank": 0}\n') and not exits.has_result("") \
        and not exits.has_result("Traceback ...\n")
