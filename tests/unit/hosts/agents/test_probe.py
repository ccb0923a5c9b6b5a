"""The reachability probe (hosts/agents/probe.py) on loopback addresses: probes stop early once their pairs
are settled, never before every probe has started, and never miss a leak or an unreachable target."""
import threading
import time

from hosts.agents.probe import LINGER_S, probe

PORT = 47613
A, B, C = "127.0.0.2", "127.0.0.3", "127.0.0.4"


def start(results, name, *args, delay=0.0, **kw):
    def body():
        time.sleep(delay)
        t = time.time()
        results[name] = {**probe(*args, **kw), "ran_s": time.time() - t}
    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread


def test_probes_that_reach_each_other_stop_long_before_the_deadline_even_with_a_late_start():
    now, out = time.time(), {}
    until, not_before = now + 20, now + 0.8
    threads = [start(out, "a", [B], until, PORT, {B}, not_before, address=A),
               start(out, "b", [A], until, PORT, {A}, not_before, address=B, delay=0.5)]
    for t in threads:
        t.join(30)
    assert out["a"]["reached"] == [B] and out["b"]["reached"] == [A]
    finished = now + 0.5 + out["b"]["ran_s"]
    assert not_before + LINGER_S - 0.05 <= finished < now + 5, out      # early, but never before `not_before`


def test_a_leaking_isolated_target_that_starts_late_is_still_caught():
    """`c` should not answer `a` (not expected) but does; it starts just before every probe has started."""
    now, out = time.time(), {}
    until, not_before = now + 20, now + 1.0
    threads = [start(out, "a", [B, C], until, PORT, {B}, not_before, address=A),
               start(out, "b", [A], until, PORT, {A}, not_before, address=B),
               start(out, "c", [], until, PORT, set(), not_before, address=C, delay=0.9)]
    for t in threads:
        t.join(30)
    assert out["a"]["reached"] == [B, C] and out["a"]["unreached"] == []
    assert out["a"]["ran_s"] < 5


def test_an_expected_target_that_never_answers_keeps_the_probe_to_its_deadline():
    now, out = time.time(), {}
    start(out, "a", [B], now + 2.0, PORT, {B}, now + 0.2, address=A).join(30)
    assert out["a"]["reached"] == [] and out["a"]["unreached"] == [B]
    assert out["a"]["ran_s"] >= 1.9


def test_without_expectations_a_probe_runs_to_its_deadline():
    now, out = time.time(), {}
    threads = [start(out, "a", [B], now + 1.5, PORT, None, address=A),
               start(out, "b", [A], now + 1.5, PORT, None, address=B)]
    for t in threads:
        t.join(30)
    assert out["a"]["reached"] == [B] and out["a"]["ran_s"] >= 1.4
