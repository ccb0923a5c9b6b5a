"""A GPU fault on a Docker host strikes its container only once a rank runs in it, as on a namespace host:
struck earlier, the rank would fail to start and the fault would never be recorded."""
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
    assert container_fault(empty, sig) == 0 and empty.calls == []       # nothing started yet: left alone
    busy = FakeContainer("running", ranks=2)
    assert container_fault(busy, sig) == 2 and busy.calls == ["kill" if sig == signal.SIGKILL else "pause"]


def test_a_paused_container_is_resumed_whatever_runs_in_it():
    paused = FakeContainer("paused", ranks=0)
    assert container_fault(paused, signal.SIGCONT) == 0 and paused.calls == ["unpause"]
