"""GPU failures as signals to the processes of a GPU host: a crash is SIGKILL, a hang SIGSTOP; the rank
program alone gets SIGUSR1 (declared failed) and SIGUSR2 (a stalled GPU). Docker hosts crash and hang as a
whole (their backend's `fail`)."""
from __future__ import annotations

import signal

RANK_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)     # handled by the rank program itself, sent to it alone
RANK_PROGRAM = "hosts.agents.collective_rank"


def host_processes(net, host: str) -> list[int]:
    """PIDs running in an emulated host (on its machine), except its shell and the testbed's tools there."""
    return list(net.host(host).processes())


def rank_processes(net, host: str) -> list[int]:
    """PIDs of collective rank processes in a host."""
    return [pid for pid, cmdline in net.host(host).processes().items() if RANK_PROGRAM in cmdline]


def signal_gpus(net, hosts: list[str], sig, idle: bool = True) -> int:
    """A GPU failure: the rank processes of these hosts crash (SIGKILL), hang (SIGSTOP) or resume; the rank
    programs alone get SIGUSR1 (declared failed) and SIGUSR2 (a stalled GPU: its main loop blocks, the process
    lives on). A Docker host crashes and hangs as a whole: its container is killed, paused or unpaused; with
    idle=False only once a process of the testbed runs in it, as a namespace host's failure hits its processes."""
    hit = 0
    for host in hosts:
        node = net.host(host)
        if sig in RANK_SIGNALS:
            pids = rank_processes(net, host)
        else:
            failed = node.fail(sig, idle)    # the backend's own way (a container), if it has one
            if failed is not None:
                hit += failed
                continue
            pids = host_processes(net, host)
        hit += node.signal(pids, sig)
    return hit
