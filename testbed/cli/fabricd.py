"""The process that keeps a fabric up for `testbed up` (`testbed up --foreground`): bring-up, then wait.

It owns the Network (the fabric lock, Mininet's objects, the controller) and records `live` in the run's state
file; SIGTERM (`testbed down`), SIGINT and SIGHUP end the wait and tear the fabric down. When started detached
by `testbed up` it reports on a pipe (ready_fd): one JSON line, ready or the one-line reason it is not. Until
then it is tied to that `testbed up`: if it dies (SIGKILL included), the kernel sends SIGTERM, and the fabric is
torn down as soon as what bring-up has made can be, instead of staying up for nobody.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class _Stop:
    """Set by a stop signal; bring-up is finished (or abandoned by its own error) before the teardown."""

    def __init__(self):
        self.signal = None
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._set)

    def _set(self, signum, frame) -> None:
        self.signal = signum


def serve(doc: dict, source: str, ready_fd: int | None) -> int:
    from testbed import runner
    from testbed.fabric import runstate
    from testbed.fabric.network import Network
    from testbed.scenario import host_limits
    routing = doc.get("routing", {})
    net = Network(runner.fabric_of(doc), routing=routing.get("mode", "ecmp"), failover=routing.get("failover", True),
                  hosts=doc.get("hosts", "netns"), host_limits=host_limits(doc),
                  controller_delay_ms=routing.get("controller_delay_ms", 0))
    stop = _Stop()
    if ready_fd is not None:
        _tie_to_parent(ready_fd)
    try:
        if stop.signal is None:
            net.start()
        if ready_fd is not None:
            _untie_from_parent()            # up: from now on it outlives `testbed up`
        if stop.signal is not None:         # `testbed up` died, or a stop came, while it came up
            print(f"signal {stop.signal} during bring-up: tearing down", flush=True)
            return 0
        runstate.record(net.run_dir, live={"since": time.time(), "source": source, "routing": net.routing,
                                           "failover": net.failover, "transport": net.rdma["transport"],
                                           "bring_up_s": round(net.timings["bring_up_s"], 3)})
        if not _report(ready_fd, {"ok": True, "pid": os.getpid(), "run_dir": net.run_dir, "bring_up_s":
                                  net.timings["bring_up_s"], "lock_wait_s": net.timings.get("lock_wait_s", 0)}):
            print("`testbed up` is gone: tearing down", flush=True)
            return 0
        while stop.signal is None:
            time.sleep(0.5)
        print(f"signal {stop.signal}: tearing down", flush=True)
    except Exception as exc:      # one line for `testbed up`; the details stay in the log
        _report(ready_fd, {"ok": False, "error": f"{type(exc).__name__}: {exc}"})
        import traceback
        traceback.print_exc()
        return 1
    finally:
        if ready_fd is not None:
            _untie_from_parent()
        net.stop()
    return 0


def _tie_to_parent(ready_fd: int) -> None:
    """SIGTERM when `testbed up` dies before the fabric is ready (a stop signal: bring-up ends, then teardown)."""
    import select
    from testbed.fabric.linuxcalls import parent_death_signal
    parent_death_signal(signal.SIGTERM)
    poll = select.poll()
    poll.register(ready_fd, select.POLLERR)
    if poll.poll(0):                # the pipe's reader is gone: it died before the signal was armed
        signal.raise_signal(signal.SIGTERM)


def _untie_from_parent() -> None:
    from testbed.fabric.linuxcalls import parent_death_signal
    parent_death_signal(0)


def _report(ready_fd: int | None, message: dict) -> bool:
    """Tell whoever started it; False if that was `testbed up` and it is gone."""
    if ready_fd is None:        # started by hand in the foreground: tell the terminal
        if message["ok"]:
            print(f"fabric up in {message['bring_up_s']:.1f} s (pid {message['pid']}); Ctrl-C or `testbed down` "
                  "tears it down", flush=True)
        else:
            print(f"testbed up: error: {message['error']}", file=sys.stderr, flush=True)
        return True
    try:
        os.write(ready_fd, (json.dumps(message) + "\n").encode())
    except OSError:             # `testbed up` is gone (interrupted): nobody to tell
        return False
    finally:
        os.close(ready_fd)
    return True
