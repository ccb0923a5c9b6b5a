"""What a run shows while it runs, at each level, on a terminal and in a log, from a fake stream of events."""
import io

import pytest

from testbed.runtime import progress
from testbed.runtime.progress import DEBUG, NORMAL, QUIET, VERBOSE, Progress


class Terminal(io.StringIO):
    def isatty(self):
        return True


class Clock:
    """A clock that moves only when the test says."""
    t = 0.0

    def __call__(self):
        return self.t


def reporter(level=NORMAL, tty=False, color=False, stream=None):
    clock = Clock()
    out, err = stream if stream is not None else io.StringIO(), io.StringIO()
    p = Progress(level, stream=out, err=err, tty=tty, color=color, clock=clock, refresh_s=None)
    p.clock = clock
    return p, out, err


def a_run(p):
    """The events of a short run: bring-up, a collective of two sizes under a link fault, a failed workload."""
    def at(t):
        p.clock.t = t
    p.stage("bring-up")
    p.note("bringing up rail-optimized: 2 servers x 4 GPUs")
    at(5)
    p.workload_started(1, 2, "allreduce-ring", "collective allreduce/ring")
    p.programs("hosts.agents.collective_rank", [f"s0g{i}" for i in range(10)])
    p.step(0, 2, "size 1/2 (1048576 B)", frac=0.0)
    at(8.2)
    p.fault("link-flap", "rail0-spine0", "injected", 3.0)
    p.fault("link-flap", "rail0-spine0", "detected", 3.012, at=3.0)
    p.fault("link-flap", "rail0-spine0", "installed", 3.031, at=3.0, how="")
    at(9)
    p.row("     1048576     262144    float32       100000", header="#  allreduce / ring, 8 ranks\n#  size")
    p.step(1, 2, "1/2 sizes done", frac=0.25)
    at(17.4)
    p.row("     2097152     524288    float32       200000", header="#  allreduce / ring, 8 ranks\n#  size")
    p.workload_done("allreduce-ring", True, 12.34, "allreduce/ring on 8 ranks, 2 sizes")
    p.workload_started(2, 2, "alltoall", "collective alltoall/direct")
    at(80)
    p.fault("gpu-crash", "s1g2", "recovered", 7.9, at=6.0, how="(spare with s1spare0)")
    p.warning("CPU idle averaged 3%")
    p.workload_done("alltoall", False, 3.0)
    p.done(False)


def test_a_log_gets_one_plain_line_per_event_with_the_elapsed_time():
    p, out, err = reporter()
    a_run(p)
    assert out.getvalue().splitlines() == [
        "[00:00] bringing up rail-optimized: 2 servers x 4 GPUs",
        "[00:05] [1/2] allreduce-ring (collective allreduce/ring)",
        "[00:08]   fault link-flap rail0-spine0: injected (t=3.00 s)",
        "[00:08]   fault link-flap rail0-spine0: detected after 12 ms (t=3.01 s)",
        "[00:08]   fault link-flap rail0-spine0: rules installed after 31 ms (t=3.03 s)",
        "[00:09] #  allreduce / ring, 8 ranks",
        "[00:09] #  size",
        "[00:09]      1048576     262144    float32       100000",
        "[00:17]      2097152     524288    float32       200000",      # the header once per workload
        "[00:17]   ok in 12.3 s: allreduce/ring on 8 ranks, 2 sizes",
        "[00:17] [2/2] alltoall (collective alltoall/direct)",
        "[01:20]   fault gpu-crash s1g2: recovered after 1.90 s (spare with s1spare0) (t=7.90 s)",
        "[01:20]   warning: CPU idle averaged 3%",
        "[01:20]   FAILED in 3.0 s",
        "[01:20] finished in 1:20: a check failed"]
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue() and err.getvalue() == ""


def test_verbose_adds_stages_and_program_starts():
    p, out, _ = reporter(VERBOSE)
    a_run(p)
    lines = out.getvalue().splitlines()
    assert lines[0] == "[00:00] stage: bring-up"
    assert "[00:05]   start hosts.agents.collective_rank on s0g0 s0g1 s0g2 s0g3 s0g4 s0g5 s0g6 s0g7 (+2 more)" in lines
    normal, _, _ = reporter(NORMAL)
    a_run(normal)
    assert len(lines) == len(normal.stream.getvalue().splitlines()) + 2


def test_quiet_prints_nothing_but_errors():
    p, out, err = reporter(QUIET, tty=True, color=True, stream=Terminal())
    a_run(p)
    p.error("RuntimeError: the controller exited", RuntimeError("x"))
    assert out.getvalue() == ""
    assert err.getvalue() == "\x1b[2m[01:20]\x1b[0m \x1b[31merror: RuntimeError: the controller exited\x1b[0m\n"
    p, out, err = reporter(QUIET, tty=True, color=None, stream=Terminal())     # stderr not a terminal: plain
    p.error("x")
    assert err.getvalue() == "[00:00] error: x\n"


def test_a_terminal_gets_a_status_line_redrawn_in_place_and_colours():
    p, out, _ = reporter(tty=True, color=True, stream=Terminal())
    a_run(p)
    text = out.getvalue()
    assert "\r\x1b[K" in text                        # the status line cleared before each line
    assert "\x1b[32mok\x1b[0m in 12.3 s" in text and "\x1b[31mFAILED\x1b[0m" in text
    statuses = [s.split("\x1b[K")[0] for s in text.split("\r") if s.startswith("\x1b[36m")]
    assert any("[1/2] allreduce-ring · size 1/2 (1048576 B)" in s for s in statuses), statuses
    assert any("1/2 sizes done · 4 s, ETA 12 s · run 00:09" in s for s in statuses), statuses   # 4 s for 1/4
    assert text.endswith("a check failed\x1b[0m\n")          # done(): the status line is gone for the summary


def test_colour_only_on_a_terminal_and_not_with_no_color(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert progress.wants_color(Terminal()) and not progress.wants_color(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not progress.wants_color(Terminal())
    p = Progress(NORMAL, stream=Terminal(), refresh_s=None)
    assert p.tty and not p.color
    p.workload_done("w", True, 1.0)
    assert "\x1b[3" not in p.stream.getvalue() and "\r" in p.stream.getvalue()      # status line, no colour


def test_debug_shows_the_traceback_of_an_unexpected_error():
    def fail():
        raise ValueError("bad state file")
    for level, traced in ((NORMAL, False), (DEBUG, True)):
        p, out, err = reporter(level)
        try:
            fail()
        except ValueError as exc:
            p.error("ValueError: bad state file", exc)
        assert "error: ValueError: bad state file" in err.getvalue()
        assert ("Traceback (most recent call last):" in err.getvalue()) == traced
        assert ('in fail\n' in err.getvalue()) == traced


def test_eta_extrapolates_the_share_of_work_done():
    assert progress.eta(10.0, 0.25) == pytest.approx(30.0)
    assert progress.eta(10.0, 0.0) is None and progress.eta(0.0, 0.5) is None
    assert progress.eta(10.0, 1.0) is None
    p, _, _ = reporter()
    p.clock.t = 2.0
    p.workload_started(3, 6, "sweep")
    p.step(0, 4, "size 1/4 (1024 B)")
    p.clock.t = 6.5
    assert p.status() == "[3/6] sweep · size 1/4 (1024 B) · 4 s · run 00:06"        # nothing done: no ETA
    p.step(1, 4)                                          # equal steps by default: 1/4 done in 4.5 s
    assert p.status() == "[3/6] sweep · 1/4 done · 4 s, ETA 14 s · run 00:06"      # 13.5 s left


def test_durations_and_clocks():
    assert [progress.duration(s) for s in (0.4, 59.4, 61, 3723)] == ["0 s", "59 s", "1:01", "1:02:03"]
    assert [progress.clock(s) for s in (0, 12.9, 187, 3723)] == ["00:00", "00:12", "03:07", "1:02:03"]


def test_echo_takes_every_line_and_workloads_report_through_the_current_reporter():
    lines = []
    p = Progress(echo=lines.append)
    assert progress.current() is progress.SILENT
    with progress.active(p):
        progress.current().note("hello")
    assert progress.current() is progress.SILENT
    assert len(lines) == 1 and lines[0].endswith("] hello")
    progress.current().note("nobody hears this")
    assert len(lines) == 1
