"""The reachability probe (hosts/agents/probe.py) on loopback addresses: probes stop early once their pairs
are settled, never before every probe has started, and never miss a leak or an unreachable target."""
import socket
import threading
import time

import pytest

from hosts.agents.probe import LINGER_S, probe

NET = {"late": 1, "leak": 2, "unreachable": 3, "unknown": 4, "slow": 5}       # a loopback /24 per test: they run at once


@pytest.fixture
def addrs(request):
    """Three loopback addresses of this test's own and a UDP port free on them."""
    net = NET[request.param]
    a, b, c = (f"127.0.{net}.{i}" for i in (2, 3, 4))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((a, 0))
        port = s.getsockname()[1]
    return a, b, c, port


def start(results, name, *args, delay=0.0, **kw):
    def body():
        time.sleep(delay)
        t = time.time()
        results[name] = {**probe(*args, **kw), "ran_s": time.time() - t}
    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("addrs", ["late"], indirect=True)
def test_probes_that_reach_each_other_stop_long_before_the_deadline_even_with_a_late_start(addrs):
    A, B, _, PORT = addrs
    now, out = time.time(), {}
    until, not_before = now + 20, now + 0.8
    threads = [start(out, "a", [B], until, PORT, {B}, not_before, address=A),
               start(out, "b", [A], until, PORT, {A}, not_before, address=B, delay=0.5)]
    for t in threads:
        t.join(30)
    assert out["a"]["reached"] == [B] and out["b"]["reached"] == [A]
    finished = now + 0.5 + out["b"]["ran_s"]
    assert not_before + LINGER_S - 0.05 <= finished < now + 5, out      # early, but never before `not_before`


@pytest.mark.parametrize("addrs", ["leak"], indirect=True)
def test_a_leaking_isolated_target_that_starts_late_is_still_caught(addrs):
    """`c` should not answer `a` (not expected) but does; it starts just before every probe has started."""
    A, B, C, PORT = addrs
    now, out = time.time(), {}
    until, not_before = now + 20, now + 1.0
    threads = [start(out, "a", [B, C], until, PORT, {B}, not_before, address=A),
               start(out, "b", [A], until, PORT, {A}, not_before, address=B),
               start(out, "c", [], until, PORT, set(), not_before, address=C, delay=0.9)]
    for t in threads:
        t.join(30)
    assert out["a"]["reached"] == [B, C] and out["a"]["unreached"] == []
    assert out["a"]["ran_s"] < 5


@pytest.mark.parametrize("addrs", ["unreachable"], indirect=True)
def test_an_expected_target_that_never_answers_keeps_the_probe_to_its_deadline(addrs):
    A, B, _, PORT = addrs
    now, out = time.time(), {}
    start(out, "a", [B], now + 2.0, PORT, {B}, now + 0.2, address=A).join(30)
    assert out["a"]["reached"] == [] and out["a"]["unreached"] == [B]
    assert out["a"]["ran_s"] >= 1.9


@pytest.mark.parametrize("addrs", ["unknown"], indirect=True)
def test_without_expectations_a_probe_runs_to_its_deadline(addrs):
    A, B, _, PORT = addrs
    now, out = time.time(), {}
    threads = [start(out, "a", [B], now + 1.5, PORT, None, address=A),
               start(out, "b", [A], now + 1.5, PORT, None, address=B)]
    for t in threads:
        t.join(30)
    assert out["a"]["reached"] == [B] and out["a"]["ran_s"] >= 1.4


@pytest.mark.parametrize("addrs", ["slow"], indirect=True)
def test_probes_that_all_start_after_their_window_still_get_it(addrs):
    """A machine so slow (software emulation) that every probe starts after `until`: each gets the whole window
    from its own start, and they reach each other."""
    A, B, _, PORT = addrs
    now, out = time.time(), {}
    not_before, until = now - 3.0, now - 1.0                      # a 2 s window, already over
    threads = [start(out, "a", [B], until, PORT, {B}, not_before, address=A),
               start(out, "b", [A], until, PORT, {A}, not_before, address=B, delay=0.5)]
    for t in threads:
        t.join(30)
    assert out["a"]["reached"] == [B] and out["b"]["reached"] == [A], out
    assert out["a"]["ran_s"] < 2.5
