"""`testbed clean` and link delay: a crashed run's delay process is found by its recorded PID and command line,
and a live run's delay devices in the root namespace are kept."""
import time

from testbed import clean


def test_a_crashed_runs_delay_process_is_found_by_pid_and_marker():
    found = clean.stale_processes({"/run/testbed/run-1": {"delay_pids": [4321], "host_pids": {}}})
    assert (4321, "testbed.fabric.delayd") in found


def test_the_marker_is_in_the_daemons_command_lines():
    """What clean looks for is in the command line of the delay and pause processes, as they run."""
    import inspect
    from testbed.fabric import delay, pfc
    from testbed.fabric.daemon import Daemon
    for module, user in (("testbed.fabric.delayd", delay), ("testbed.fabric.pfcd", pfc)):
        assert f'Daemon("{module}"' in inspect.getsource(user)
        daemon = Daemon(module)
        try:
            deadline = time.monotonic() + 10
            while True:             # until the child has exec'd (before that, its command line is ours)
                with open(f"/proc/{daemon.pid}/cmdline") as f:
                    argv = f.read().split("\0")
                if argv[1:3] == ["-m", module] or time.monotonic() > deadline:
                    break
                time.sleep(0.02)
        finally:
            daemon.end()
        assert argv[1:3] == ["-m", module]


def test_a_crashed_runs_pause_process_is_found_by_pid_and_marker():
    """fabric.pfc's pause process, recorded as the delay process is."""
    found = clean.stale_processes({"/run/testbed/run-1": {"pfc_pids": [4322], "host_pids": {}}})
    assert (4322, "testbed.fabric.pfcd") in found
