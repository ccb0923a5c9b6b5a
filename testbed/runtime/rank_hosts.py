"""Ranks that share processes: a collective job's `ranks_per_process` (hosts/agents/rank_host.py).

A job's rank commands (host -> `hosts.agents.collective_rank SPEC`) become fewer processes of up to
`per_process` ranks each, as evenly as they go, each started in its first host and running every one of its
ranks in that rank's own network namespace; their results are split back into one per host, so the rest of the
testbed sees the job as it would with a process per rank.
"""
from __future__ import annotations

import json
import math

from testbed.runtime import agent_results, hostlogs

PROGRAM = "hosts.agents.rank_host"
RANK_PROGRAM = "hosts.agents.collective_rank"


def groups(hosts: list[str], per_process: int) -> list[list[str]]:
    """The hosts in order, cut into as few groups of at most per_process as they fit, their sizes within one."""
    n = math.ceil(len(hosts) / per_process)
    size, extra = divmod(len(hosts), n)
    out, at = [], 0
    for g in range(n):
        take = size + (g < extra)
        out.append(hosts[at:at + take])
        at += take
    return out


def commands(net, rank_commands: dict[str, list[str]], per_process: int) -> tuple[dict, dict]:
    """(first host -> the rank host's command, first host -> the hosts it runs)."""
    out, members = {}, {}
    for group in groups(list(rank_commands), per_process):
        argv = [PROGRAM]
        for host in group:
            program, spec = rank_commands[host]
            if program != RANK_PROGRAM:
                raise ValueError(f"{host}: only {RANK_PROGRAM} ranks share processes, not {program}")
            argv += [f"/proc/{net.host(host).pid}/ns/net", spec]
        out[group[0]], members[group[0]] = argv, group
    return out, members


def split(results: dict, errors: list[str], members: dict[str, list[str]]) -> tuple[dict, list[str]]:
    """The rank hosts' results and errors as each rank's: a rank host that failed fails all its ranks."""
    by_host, failed = {}, []
    for first, group in members.items():
        if first not in results:
            why = next((e.split(": ", 1)[1] for e in errors if e.split(":", 1)[0] == first), "no result")
            failed += [f"{host}: in the rank process of {', '.join(group)}: {why}" for host in group]
        elif len(results[first]["ranks"]) != len(group):
            failed += [f"{host}: the rank process of {', '.join(group)} printed {len(results[first]['ranks'])} "
                       f"results for {len(group)} ranks" for host in group]
        else:
            for host, doc in zip(group, results[first]["ranks"]):
                bad = agent_results.problem(RANK_PROGRAM, doc)
                if bad:
                    failed.append(f"{host}: {RANK_PROGRAM} printed a result its schema rejects: {bad}")
                else:
                    by_host[host] = doc
    return by_host, failed


def keep(net, by_host: dict[str, dict]) -> None:
    """Each rank's result line in its own host's folder, as a process of its own leaves it (the rank process's
    whole output and stderr are its first host's, as rank_host.stdout and .stderr)."""
    for host, doc in by_host.items():
        hostlogs.keep(net, host, RANK_PROGRAM, 0, json.dumps(doc), "")


def on_exit(reporter, members: dict[str, list[str]]):
    """The launcher's exit hook of a rank host, as the hook `reporter` of each of its ranks."""
    def ended(first: str, returncode: int, out: str, err: str) -> None:
        for host in members[first]:
            reporter(host, returncode, out, err)
    return ended
