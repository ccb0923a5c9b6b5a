"""Run one Python process of the `hosts` package in each of several emulated hosts, concurrently.

Each process prints one JSON document on stdout, checked against its program's result schema
(agent_results.py); a process that fails, prints nothing usable or a result its schema rejects,
outlives the timeout or stays stopped after the others ended becomes an error naming its host (the process
is killed by PID; one that outlived the timeout first prints its threads' stacks to its stderr, kept in the
host's log, if it catches SIGQUIT as hosts.agents programs do).
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time

from testbed import PROJECT_ROOT
from testbed.runtime import agent_results, hostlogs, progress


class LaunchError(RuntimeError):
    pass


FRAME = re.compile(r'File "(.*)", line (\d+) in (.*)')


def why(returncode: int, stderr: str) -> str:
    """How a host program ended without its JSON line, in one line: its exit status or signal, and the last
    line of its stderr or, after a crash, the innermost frame of the crashing thread (faulthandler's dump)."""
    lines = [line.strip() for line in stderr.strip().splitlines()]
    if returncode == -signal.SIGKILL:
        return f"was killed: {lines[-1] if lines else 'no output'}"
    if returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.Signals._value2member_map_ else -returncode
        crashing = next((i for i, line in enumerate(lines) if line.startswith("Current thread")), None)
        frames = []
        for line in lines[crashing + 1:] if crashing is not None else []:
            frame = FRAME.match(line)
            if not frame:
                break
            frames.append(f"{os.path.basename(frame[1])}:{frame[2]} {frame[3]}")
        return f"died of {name}" + (f" in {' < '.join(frames[:3])}" if frames else "")
    return f"exited {returncode}: {lines[-1] if lines else 'no output'}"


def process_state(pid: int) -> str | None:
    """A process of this machine's state letter in /proc (R, S, T stopped, Z zombie ...); None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def stopped(pid: int) -> bool:
    """Whether a process of this machine is stopped (SIGSTOP: the fault gpu-hang on a namespace host)."""
    return process_state(pid) in ("T", "t")


def run_on_hosts(net, commands: dict[str, list[str]], timeout: float, partial: bool = False, on_exit=None):
    """commands: host name -> argv after `python -m`; returns host name -> parsed JSON output.
    on_exit(host, returncode, stdout, stderr), if given, is called the moment each process ends (from a thread).

    A process still stopped (a hung GPU) once all the others have ended is not waited for: nothing it could
    do after its resumption would change the job's outcome, and the fault may never resume it. It is killed
    and reported, as one that outlives the timeout is.

    With partial=True, returns (outputs of the processes that produced one, errors of the others)
    instead of raising LaunchError."""
    procs: dict[str, subprocess.Popen] = {}
    for program in dict.fromkeys(argv[0] for argv in commands.values()):        # shown with -v
        progress.current().programs(program, [h for h, argv in commands.items() if argv[0] == program])
    try:
        for host, argv in commands.items():
            node = net.host(host)
            # -X faulthandler: a process that crashes (SIGSEGV, SIGABRT) prints where, which why() reports
            procs[host] = node.popen([node.python, "-X", "faulthandler", "-m", *argv], cwd=PROJECT_ROOT,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ended, cut_short = _wait(procs, time.monotonic() + timeout, on_exit)
        results, errors = {}, []
        for host, proc in procs.items():
            out, err = ended[host]
            hostlogs.keep(net, host, commands[host][0], proc.returncode, out, err)    # RESULTS/hosts/HOST/
            if host in cut_short:
                errors.append(f"{host}: `{' '.join(commands[host][:1])}` {cut_short[host]}")
                continue
            try:
                doc = json.loads(out.strip().splitlines()[-1])
            except (ValueError, IndexError):
                errors.append(f"{host}: {commands[host][0]} {why(proc.returncode, err)}")
                continue
            bad = agent_results.problem(commands[host][0], doc)
            if bad:
                errors.append(f"{host}: {commands[host][0]} printed a result its schema rejects: {bad}")
            else:
                results[host] = doc
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


STACKS_S = 0.5      # for a host program to print its threads' stacks before it is killed


def process_id(proc: subprocess.Popen) -> int:
    """The PID of the program itself (in a Docker host, the child nsenter started): for its signals, budget and
    CPU time."""
    inner = getattr(proc, "inner_pid", None)
    return (inner() if inner else None) or proc.pid


def dump_stacks(proc: subprocess.Popen) -> bool:
    """Ask a host program for its threads' stacks on its stderr (SIGQUIT, which hosts.agents programs catch);
    False, and nothing sent, if it does not catch SIGQUIT (it would die of it, maybe leaving a core file)."""
    try:
        with open(f"/proc/{process_id(proc)}/status") as f:
            caught = next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
        if not caught >> (signal.SIGQUIT - 1) & 1:
            return False
        proc.send_signal(signal.SIGQUIT)
        return True
    except (OSError, StopIteration, ValueError):
        return False


def _wait(procs: dict[str, subprocess.Popen], deadline: float, on_exit=None) -> tuple[dict, dict]:
    """({host: (stdout, stderr)}, {host: why it was killed}): every process's output, each read by a thread
    of its own; those that outlive the deadline, or stay stopped once all the others have ended, are killed."""
    ended, cut_short, lock, changed = {}, {}, threading.Lock(), threading.Event()

    def read(host: str, proc: subprocess.Popen) -> None:
        out, err = proc.communicate()
        if on_exit is not None:
            on_exit(host, proc.returncode, out, err)
        with lock:
            ended[host] = (out, err)
        changed.set()

    readers = [threading.Thread(target=read, args=item, daemon=True) for item in procs.items()]
    for reader in readers:
        reader.start()
    timeout = deadline - time.monotonic()
    while True:
        with lock:
            pending = [h for h in procs if h not in ended]
        if not pending:
            break
        late = time.monotonic() >= deadline          # running on: where it waits is worth its stacks
        if late:
            why_cut = f"still running after {timeout:.0f} s"
        elif len(pending) < len(procs) and all(stopped(procs[h].pid) for h in pending):
            why_cut = "stopped (a hung GPU) when every other process had ended"
        else:
            changed.wait(0.2)
            changed.clear()
            continue
        asked = [h for h in pending if late and dump_stacks(procs[h])]
        for host in pending:
            cut_short[host] = why_cut + (" (its threads' stacks are in its stderr)" if host in asked else "")
        if asked:
            time.sleep(STACKS_S)
        for host in pending:
            procs[host].kill()
        break
    for reader in readers:
        reader.join()
    return ended, cut_short
