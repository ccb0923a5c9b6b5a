"""Workload `program`: a user's own distributed program as the ranks of a job on the emulated GPU hosts.

    - {type: program, name: gloo, command: "{python} hosts/programs/torch_gloo.py", hosts: [s0g0, s1g0],
       figures: {busbw: {json: busbw_MBps, min: 0.5}}}

Rank r runs on the r-th host listed (all GPU hosts, s0g0, s0g1, ..., s1g0, ... by default) with the
environment torchrun and tf.distribute expect (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR =
rank 0's NIC address, MASTER_PORT, TF_CONFIG), or, with `launcher: mpirun`, as one rank per host of an Open MPI
job (program_launch.py). Each rank's stdout and stderr are kept in the results folder (programs/<name>/); a
number the program prints becomes a figure: the last match of a regular expression, or the last JSON line that
has the key. The job passes when every rank exits 0 (`expect: failure`: when it ends, on its own, with an error:
how a library takes a crashed peer; `expect: hang`: when it is still running at its timeout), and each figure
was printed within its bounds. The bytes delivered to the job's NICs are sampled while it runs
(program_traffic.py): its silences are what a fault's stall looked like from the network.
"""
from __future__ import annotations

import json
import os
import re
import signal
import tempfile
import time

from testbed.fabric import ovs
from testbed.scenario.schema import ScenarioError
from testbed.workloads import collective_fabric, collective_rows
from testbed.workloads import program_launch as launch
from testbed.workloads import program_traffic
from testbed.workloads.program_faults import struck  # noqa: F401 (how it took a fault)
from testbed.workloads.program_schema import RESULT_SCHEMA, SCHEMA  # noqa: F401 (its schemas)

DEFAULTS = {"launcher": "env", "port": 29500, "env": {}, "mpirun_args": [], "timeout_s": 300, "figures": {},
            "expect": "success"}
NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def settings(spec: dict) -> dict:
    return {**DEFAULTS, **spec}


def job_hosts(fabric, spec: dict) -> list:
    """The job's hosts in rank order: those listed, or every GPU host server by server."""
    if "hosts" not in spec:
        return collective_fabric.ranks(fabric)
    missing = [h for h in spec["hosts"] if h not in fabric.hosts]
    if missing:
        raise ScenarioError(f"program host {missing[0]!r} is not a host of this fabric; hosts are "
                            f"{', '.join(fabric.hosts)}")
    return [fabric.hosts[h] for h in spec["hosts"]]


def validate(fabric, spec: dict, scenario: dict | None = None) -> None:
    s = settings(spec)
    hosts = job_hosts(fabric, s)
    try:
        launch.argv(s["command"], "python")
    except ValueError as exc:
        raise ScenarioError(f"program command: {exc}") from None
    if not launch.argv(s["command"], "python"):
        raise ScenarioError("program command is empty")
    for key in s["env"]:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ScenarioError(f"program env: {key!r} is not an environment variable name")
    for name, fig in s["figures"].items():
        if ("regex" in fig) == ("json" in fig):
            raise ScenarioError(f"program figure {name!r} needs one of regex or json")
        if "regex" in fig:
            try:
                re.compile(fig["regex"])
            except re.error as exc:
                raise ScenarioError(f"program figure {name!r}: regex {fig['regex']!r}: {exc}") from None
        if fig.get("rank", 0) >= len(hosts):
            raise ScenarioError(f"program figure {name!r}: rank {fig['rank']} of a job of {len(hosts)} ranks")
    if s["launcher"] == "mpirun" and (scenario or {}).get("machines"):
        raise ScenarioError("program launcher mpirun does not work across machines yet (its remote shell enters "
                            "hosts on this machine); use launcher env")
    if "name" in s and not NAME.match(s["name"]):
        raise ScenarioError(f"program name {s['name']!r}: use letters, digits, '.', '_' and '-' (it names a folder)")


def warnings(fabric, spec: dict) -> list[str]:
    return []


def figure(text: str, fig: dict):
    """The figure a rank's output gives: the last match of the regex (its group `value`, else its first group,
    else the match), or the value at the key (dotted path) of the last JSON line that has it. A number where it
    reads as one; None if the output has none."""
    value = None
    if "regex" in fig:
        matches = list(re.finditer(fig["regex"], text, re.MULTILINE))
        if not matches:
            return None
        m = matches[-1]
        value = m.group("value") if "value" in m.re.groupindex else m.group(1) if m.re.groups else m.group(0)
    else:
        for line in reversed(text.splitlines()):
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            for key in fig["json"].split("."):
                obj = obj.get(key) if isinstance(obj, dict) else None
            if obj is not None:
                value = obj
                break
    if isinstance(value, bool):                 # a JSON true/false ("correct": true): 1 or 0, so min/max check it
        return int(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def how_ended(code: int | None) -> str:
    if code is None:
        return "still running at the timeout (killed)"
    if code < 0:
        return f"killed by {signal.Signals(-code).name}" if -code in signal.Signals._value2member_map_ \
            else f"killed by signal {-code}"
    return f"exited {code}"


# A raised exception's line in a Python traceback ("RuntimeError: ...", "tensorflow...UnavailableError: ...")
EXCEPTION = re.compile(r"^(?:\[rank\d+\]:\s*)?(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit)\b:?")


def last_line(path: str) -> str:
    """What a rank's log says of its error: the last exception line (what the library raised: its message may
    go on over more lines, and the traceback's last line can be a TF op's name), else the last line that says
    something."""
    try:
        with open(path, errors="replace") as f:
            raw = [line.rstrip() for line in f if line.strip()]
    except OSError:
        return ""
    lines = [line.strip() for line in raw]
    raised = [i for i, line in enumerate(lines) if EXCEPTION.match(line)]
    if not raised:
        return (lines or [""])[-1][:200]
    i = raised[-1]
    if lines[i].endswith(":"):          # the message goes on below (TF: after the node's traceback)
        more = next((line for line in raw[i + 1:] if not line[0].isspace()
                     and not line.startswith("Detected at node")), "")
        return f"{lines[i]} {more}".strip()[:200]
    return lines[i][:200]


def log_dir(net, name: str) -> str:
    """programs/<name>/ in the results folder (a temporary folder when run outside a scenario run)."""
    out = getattr(net, "out_dir", None)
    if out is None:
        return tempfile.mkdtemp(prefix=f"tb-program-{name}-")
    path, n = os.path.join(out, "programs", name), 1
    while os.path.exists(path):                 # a second job of that name (or unnamed) keeps its own logs
        n += 1
        path = os.path.join(out, "programs", f"{name}-{n}")
    os.makedirs(path)
    return path


def run(net, spec: dict) -> dict:
    fabric, s = net.fabric, settings(spec)
    hosts = job_hosts(fabric, s)
    logs = os.path.abspath(log_dir(net, s.get("name", "program")))
    before = net.counters()
    started = time.time()
    if s["launcher"] == "mpirun":
        procs, shell, folder = launch.start_mpirun(net, hosts, s, logs)
    else:
        procs = launch.start_env(net, hosts, s, logs)
    try:
        with program_traffic.Sampler(program_traffic.nic_devices(fabric, hosts)) as sampler:
            ends = launch.supervise(procs, s["timeout_s"])
    finally:
        if s["launcher"] == "mpirun":
            shell.close()               # the hosts' remote shell, if the backend started one for the job
    after = net.counters()
    if s["launcher"] == "mpirun":
        launch.collect_mpi_output(folder, logs, len(hosts))
    result = describe(s, hosts, procs, ends, started, logs)
    if getattr(net, "out_dir", None):           # the results folder can move: name the logs relative to it
        result["logs"] = os.path.relpath(logs, net.out_dir)
    result.update(traffic(fabric, before, after))
    result.update(program_traffic.summary(sampler.samples, started))
    result["checks"] = checks(s, result)
    result["ok"] = all(c["ok"] for c in result["checks"])
    return result


def describe(s: dict, hosts: list, procs: dict, ends: dict, started: float, logs: str) -> dict:
    """Per rank: host, how it ended and when; the job's completion time; the figures; what the library did."""
    mpi = s["launcher"] == "mpirun"
    ranks = []
    for r, h in enumerate(hosts):
        end = ends.get(0 if mpi else r)
        row = {"rank": r, "host": h.name, "ip": h.ip, "stdout": f"rank{r}.stdout", "stderr": f"rank{r}.stderr"}
        if not mpi:
            row.update(exit=end["exit"], ended=how_ended(end["exit"]), seconds=round(end["ended_at"] - started, 3),
                       last_error=last_line(os.path.join(logs, row["stderr"]))
                       if end["exit"] not in (0, -signal.SIGKILL) else "")     # a crash's log says nothing of it
        ranks.append(row)
    texts = {}
    for r in {0} | {fig.get("rank", 0) for fig in s["figures"].values()}:
        with open(os.path.join(logs, f"rank{r}.stdout"), errors="replace") as f:
            texts[r] = f.read()
    figures = {name: figure(texts[fig.get("rank", 0)], fig) for name, fig in s["figures"].items()}
    result = {"type": "program", "launcher": s["launcher"], "command": s["command"], "world": len(hosts),
              "hosts": [h.name for h in hosts], "ranks": ranks, "figures": figures,
              "units": {n: f["unit"] for n, f in s["figures"].items() if "unit" in f},
              "seconds": round(max(e["ended_at"] for e in ends.values()) - started, 3),
              "logs": logs, "started_at": started,
              # the end of what rank 0 printed, JSON lines aside: a benchmark's own table, for the summary
              "output": [line[:160] for line in texts[0].splitlines() if line.strip()
                         and not line.lstrip().startswith("{")][-12:]}
    if mpi:
        end = ends[0]
        result["mpirun"] = {"exit": end["exit"], "ended": how_ended(end["exit"]),
                            "seconds": round(end["ended_at"] - started, 3),
                            "said": mpirun_said(os.path.join(logs, "mpirun.stderr")), "stderr": "mpirun.stderr"}
    result.update(library_reaction(result, ends, started))
    return result


def mpirun_said(path: str) -> list[str]:
    """What mpirun reported about how the job ended: the first sentence of each of its banners (the blocks
    between dashed lines), and its 'noticed that process rank N ... exited on signal' lines."""
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError:
        return []
    said = []
    text_blocks = re.sub(r"^\[[^\]\s]+:\d+\] .*$", "", text, flags=re.MULTILINE)    # "[host:pid] plm:..." log lines
    for block in re.split(r"^-{20,}\s*$", text_blocks, flags=re.MULTILINE):
        words = " ".join(block.split())
        if words:
            said.append(re.split(r"(?<=[.:])\s", words, maxsplit=1)[0][:200])
    said += [line.strip()[:200] for line in text.splitlines() if "noticed that" in line]
    return list(dict.fromkeys(said))[:6]


def library_reaction(result: dict, ends: dict, started: float) -> dict:
    """When the job first ended in error on its own (the library noticed a failure, so `first_error_at` for
    the faults' outcomes), and what it said. A rank killed by SIGKILL (a crash) is the fault, not the library."""
    if result["launcher"] == "mpirun":
        m = result["mpirun"]
        if m["exit"] in (0, None) or m["exit"] == -signal.SIGKILL:
            return {"first_error_at": None}
        return {"first_error_at": ends[0]["ended_at"],
                "reaction": f"mpirun {m['ended']} at +{m['seconds']:.2f} s"
                            + (f": {m['said'][0]}" if m["said"] else "")}
    failed = [r for r in result["ranks"] if r["exit"] not in (0, None, -signal.SIGKILL)]
    if not failed:
        return {"first_error_at": None}
    first = min(failed, key=lambda r: r["seconds"])
    return {"first_error_at": started + first["seconds"],
            "reaction": f"rank {first['rank']} ({first['host']}) {first['ended']} at +{first['seconds']:.2f} s"
                        + (f": {first['last_error']}" if first["last_error"] else "")
                        + (f"; then {len(failed) - 1} more rank(s) by +{max(r['seconds'] for r in failed):.2f} s"
                           if len(failed) > 1 else "")}


def traffic(fabric, before: dict, after: dict) -> dict:
    """Bytes the switches carried during the job: in all, from the NICs, and per port that moved any."""
    ports = {p: {k: ovs.growth(before, after, p, k) for k in ("tx_bytes", "rx_bytes")} for p in after}
    return {"fabric_bytes": sum(v["tx_bytes"] for v in ports.values()),
            "nic_bytes": collective_rows.send_nic_bytes(fabric, before, after),
            "link_bytes": {p: v for p, v in sorted(ports.items()) if v["tx_bytes"] or v["rx_bytes"]}}


def exits(result: dict) -> list:
    return [result["mpirun"]["exit"]] if result["launcher"] == "mpirun" else [r["exit"] for r in result["ranks"]]


def checks(s: dict, result: dict) -> list[dict]:
    codes = exits(result)
    out = []
    if s["expect"] == "success":
        bad = [r for r in result["ranks"] if r.get("exit")] if result["launcher"] == "env" else []
        detail = (f"{result['world']} ranks exited 0 in {result['seconds']:.2f} s" if not any(c != 0 for c in codes)
                  else f"mpirun {result['mpirun']['ended']}" + (f": {result['mpirun']['said'][0]}"
                                                                if result["mpirun"]["said"] else "")
                  if result["launcher"] == "mpirun"
                  else "; ".join(f"rank {r['rank']} ({r['host']}) {r['ended']}" + (f": {r['last_error']}"
                                                                                   if r["last_error"] else "")
                                 for r in bad[:3]))
        out.append({"name": "completed", "ok": all(c == 0 for c in codes), "detail": detail})
    elif s["expect"] == "failure":
        hung = None in codes
        out.append({"name": "failed on its own", "ok": not hung and any(c != 0 for c in codes),
                    "detail": "still running at the timeout: the library did not notice" if hung
                    else result.get("reaction") or "every rank exited 0: nothing failed"})
    else:
        hung = None in codes
        out.append({"name": "hung", "ok": hung,
                    "detail": f"still running at the timeout ({s['timeout_s']:g} s): the library waited" if hung
                    else result.get("reaction") or f"it ended first, in {result['seconds']:.2f} s"})
    for name, fig in s["figures"].items():
        v = result["figures"][name]
        if v is None:
            if s["expect"] == "success":
                out.append({"name": f"figure {name}", "ok": False,
                            "detail": f"rank {fig.get('rank', 0)} printed no {name}"})
            continue
        lo, hi = fig.get("min"), fig.get("max")
        if lo is None and hi is None:
            continue
        ok = isinstance(v, (int, float)) and (lo is None or v >= lo) and (hi is None or v <= hi)
        bounds = " and ".join(b for b in (f">= {lo}" if lo is not None else "", f"<= {hi}" if hi is not None else "")
                              if b)
        out.append({"name": f"figure {name}", "ok": ok,
                    "detail": f"{number(v)} {fig.get('unit', '')}".strip() + f" (expected {bounds})"})
    return out


def number(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def summary(result: dict) -> str:
    figs = ", ".join(f"{k} {number(v)}" + (f" {result['units'][k]}" if k in result["units"] else "")
                     for k, v in result["figures"].items() if v is not None)
    line = (f"{result['launcher']}: {result['world']} ranks, {result['seconds']:.2f} s"
            + (f", {figs}" if figs else "") + f", NICs sent {result['nic_bytes'] / 1e6:.2f} MB")
    return line + (f"; {result['reaction']}" if result.get("reaction") else "")


def tables(result: dict) -> list[str]:
    lines = [f"#  program {result['command'] if isinstance(result['command'], str) else ' '.join(result['command'])}"
             f" ({result['launcher']}, {result['world']} ranks); logs in {result['logs']}"]
    if result["launcher"] == "mpirun":
        m = result["mpirun"]
        lines.append(f"# mpirun {m['ended']} after {m['seconds']:.2f} s")
        lines += [f"#   {line}" for line in m["said"]]
        lines.append("# " + ", ".join(f"rank {r['rank']} {r['host']}" for r in result["ranks"]))
    else:
        lines.append(f"# {'rank':>4} {'host':<10} {'ended':<28} {'at s':>7}  last error")
        lines += [f"  {r['rank']:>4} {r['host']:<10} {r['ended']:<28} {r['seconds']:>7}  {r['last_error']}"
                  for r in result["ranks"]]
    if result.get("output"):
        lines += ["# rank 0 printed (the end):"] + [f"  {line}" for line in result["output"]]
    return ["\n".join(lines)]


def start_line(spec: dict) -> str:
    return "program"


def report_section(workloads: list[dict]) -> list[str]:
    return []


def report_plots(workloads: list[dict], plots_dir: str) -> list[str]:
    return []
