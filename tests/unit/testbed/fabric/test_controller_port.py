"""The controller's port: a port another process holds (a second fabric's controller, a stale one) is never
shared; the controller moves to a new one instead of splitting the switches' connections with it."""
import os
import socket
import subprocess
import sys

import pytest

from testbed.fabric.controller import Controller, listens
from testbed.fabric.topo import build


def test_listens_tells_the_owner_of_a_listening_socket():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            assert listens(os.getpid(), port)
            assert not listens(other.pid, port)
        finally:
            other.kill()
            other.wait()
    assert not listens(os.getpid(), port)


@pytest.mark.parametrize("reuse_port", [True, False])
def test_a_taken_port_gets_the_controller_a_new_one(tmp_path, reuse_port):
    squatter = socket.socket()
    if reuse_port:           # what another os-ken controller would do under eventlet's default
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    controller = Controller(str(tmp_path), "ecmp", failover=True)
    controller.port = taken
    try:
        controller.launch(build("rail-only", 2, 2))
        pid = controller.wait_listening()
        assert controller.port != taken
        assert listens(pid, controller.port)
    finally:
        controller.stop()
        squatter.close()


def test_launch_does_not_wait_and_wait_listening_does(tmp_path):
    """launch() returns with the process started (the network is built meanwhile); wait_listening() returns its
    PID once it listens, which is when switches may be pointed at it."""
    controller = Controller(str(tmp_path), "single", failover=False)
    try:
        pid = controller.launch(build("rail-only", 2, 2))
        assert not listens(pid, controller.port)          # importing os-ken alone takes longer than this
        assert controller.wait_listening() == pid and listens(pid, controller.port)
    finally:
        controller.stop()
