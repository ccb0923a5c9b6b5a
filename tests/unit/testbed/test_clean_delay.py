"""`testbed clean` and link delay: a crashed run's delay process is found by its recorded PID and command line,
and a live run's delay devices in the root namespace are kept."""
from testbed import clean


def test_a_crashed_runs_delay_process_is_found_by_pid_and_marker():
    found = clean.stale_processes({"/run/testbed/run-1": {"delay_pids": [4321], "host_pids": {}}})
    assert (4321, "testbed.fabric.delayd") in found


def test_the_marker_is_in_the_delay_process_command_line():
    import inspect
    from testbed.fabric import delay
    assert '"-m", "testbed.fabric.delayd"' in inspect.getsource(delay.Delays.ask)


def test_a_crashed_runs_pause_process_is_found_by_pid_and_marker():
    """fabric.pfc's pause process, recorded as the delay process is."""
    import inspect
    from testbed.fabric import pfc
    found = clean.stale_processes({"/run/testbed/run-1": {"pfc_pids": [4322], "host_pids": {}}})
    assert (4322, "testbed.fabric.pfcd") in found
    assert '"-m", "testbed.fabric.pfcd"' in inspect.getsource(pfc.Pauses.__init__)
