"""A GPU fault timed from a workload strikes a Docker host's container only once a rank runs in it, as on a
namespace host: struck earlier, the rank would fail to start and the fault would never be recorded. By hand
(`testbed fault`) and when fencing, the container is struck whatever runs in it."""
import signal

import pytest

from testbed.fabric.backends.dockerhost import container_fault


class FakeContainer:
    def __init__(self, status: str, ranks: int):
        self.status, self.calls = status, []
        self.rows = [["1", "0", "/sbin/docker-init -- sleep infinity"]]
        for i in range(ranks):
            self.rows += [[str(10 + 2 * i), "1", "nsenter --target 1 --all"],
                          [str(11 + 2 * i), str(10 + 2 * i), "python3 -m hosts.agents.collective_rank"]]

    def reload(self):
        pass

    def top(self, ps_args=""):
        return {"Processes": self.rows}

    def kill(self):
        self.calls.append("kill")

    def pause(self):
        self.calls.append("pause")

    def unpause(self):
        self.calls.append("unpause")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP])
def test_a_gpu_fault_waits_for_a_rank_in_the_container_then_strikes_it(sig):
    empty = FakeContainer("running", ranks=0)
    struck = ["kill" if sig == signal.SIGKILL else "pause"]
    assert container_fault(empty, sig, idle=False) == 0 and empty.calls == []      # nothing started yet: left alone
    busy = FakeContainer("running", ranks=2)
    assert container_fault(busy, sig, idle=False) == 2 and busy.calls == struck
    by_hand = FakeContainer("running", ranks=0)
    assert container_fault(by_hand, sig) == 0 and by_hand.calls == struck


def test_a_paused_container_is_resumed_whatever_runs_in_it():
    paused = FakeContainer("paused", ranks=0)
    assert container_fault(paused, signal.SIGCONT, idle=False) == 0 and paused.calls == ["unpause"]
