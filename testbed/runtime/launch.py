"""Run one Python process of the `hosts` package in each of several emulated hosts, concurrently.

Each process prints one JSON document on stdout; a process that fails, prints nothing usable or
outlives the timeout becomes an error naming its host (the process is killed by PID).
"""
from __future__ import annotations

import json
import subprocess
import time

from testbed import PROJECT_ROOT


class LaunchError(RuntimeError):
    pass


def run_on_hosts(net, commands: dict[str, list[str]], timeout: float, partial: bool = False):
    """commands: host name -> argv after `python -m`; returns host name -> parsed JSON output.

    With partial=True, returns (outputs of the processes that produced one, errors of the others)
    instead of raising LaunchError."""
    procs: dict[str, subprocess.Popen] = {}
    try:
        for host, argv in commands.items():
            node = net.host(host)
            procs[host] = node.popen([node.python, "-m", *argv], cwd=PROJECT_ROOT,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + timeout
        results, errors = {}, []
        for host, proc in procs.items():
            try:
                out, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                errors.append(f"{host}: `{' '.join(commands[host][:1])}` still running after {timeout:.0f} s")
                continue
            try:
                results[host] = json.loads(out.strip().splitlines()[-1])
            except (ValueError, IndexError):
                last = (err.strip().splitlines() or ["no output"])[-1]
                how = "was killed" if proc.returncode == -9 else f"exited {proc.returncode}"
                errors.append(f"{host}: {commands[host][0]} {how}: {last}")
        if partial:
            return results, errors
        if errors:
            raise LaunchError("; ".join(errors[:3]) + (f" (+{len(errors) - 3} more)" if len(errors) > 3 else ""))
        return results
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
