"""Workload `offload`: input-pipeline offloading to tf.data.service on CPU hosts, FastFlow vs baselines.

The trainer runs in a GPU host (default s0g0) with a CPU budget for its local preprocessing and an
emulated GPU; a dispatcher runs on cpu0 and one worker, with its own CPU budget, on each CPU host. For
every pipeline it runs FastFlow (profile, Algorithm 1, train) and a sweep of fixed off-ratios for every
candidate pipeline FastFlow may choose, whose ends and middle are the baselines: TF-NO = 0 (local only),
TF-DSR = 1 (remote only), TF-DSLR = 0.5 (naive even split). Each policy runs `repeats` times, the rounds
interleaved so that a drift in the machine's load falls on every policy alike; offload_compare reports
medians with their spread. Servers are restarted for every run (workers grow in memory across jobs), and
between FastFlow's profiling and its training.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import select
import subprocess
import tempfile
import time

from hosts.cgroups import CgroupError
from hosts.spec.tfdata import ServiceSpec, TrainerSpec
from hosts.tfdata import budget
from testbed import PROJECT_ROOT
from testbed.monitor.fidelity import CpuSampler
from testbed.runtime import agent_results, hostlogs
from testbed.runtime.launch import process_id
from testbed.scenario.schema import NAME, RATE, ScenarioError
from testbed.workloads import offload_compare as compare
from testbed.workloads.offload_compare import RESULT_SCHEMA  # noqa: F401 (its record)

# This workload's part of the scenario schema (the scenario file's `workloads:` items of its type).
SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["type"],
    "description": "Input-pipeline offloading to tf.data.service on CPU hosts: FastFlow against a sweep of fixed "
                   "off-ratios (TF-NO, TF-DSLR, TF-DSR among them); needs fabric.cpu_hosts (on hosts: docker, "
                   "the image with TensorFlow, host_image tf, built on first use).",
    "properties": {
        "type": {"const": "offload", "description": "Input-pipeline offloading."}, "name": NAME,
        "pipelines": {"type": "array", "minItems": 1, "items": {"enum": ["compute", "data"]}, "default": ["compute"],
                      "description": "compute (image decoding and augmentation: CPU-heavy) and/or data (large "
                                     "elements, cheap ops: network-heavy)."},
        "pipeline_cfg": {"type": "object", "default": {}, "description": "Per pipeline, settings over its defaults: "
                         "compute {batch: 16, image: 320, crop: 288, out: 64, pool: 16}, data {batch: 4, "
                         "element_kib: 128, pool: 8}."},
        "trainer": {"type": "string", "description": "The GPU host the trainer runs in. Default: the first GPU host "
                                                     "(s0g0; in a concurrent job, the GPU of its placement)."},
        "cpu_hosts": {"type": "array", "minItems": 1, "items": {"type": "string", "pattern": "^cpu[0-9]+$"},
                      "description": "The CPU hosts that run tf.data.service (the dispatcher on the first, a worker "
                                     "on each). Default: all of the fabric's (fabric.cpu_hosts); two offload jobs "
                                     "of a concurrent workload need their own."},
        "gpu_steps_per_s": {**RATE, "default": 25, "description": "The emulated GPU's training steps per second."},
        "local_cores": {**RATE, "default": 0.3, "description": "CPU cores of the trainer's own preprocessing."},
        "worker_cores": {**RATE, "default": 0.3, "description": "CPU cores of each tf.data.service worker."},
        "seconds": {"type": "number", "minimum": 1, "maximum": 600, "default": 6,
                    "description": "Seconds of training per run."},
        "profile_s": {"type": "number", "minimum": 0.5, "maximum": 60, "default": 3,
                      "description": "Seconds of FastFlow's profiling."},
        "warmup_s": {"type": "number", "minimum": 0, "maximum": 30, "default": 1.5,
                     "description": "Seconds before measuring."},
        "threshold": {"type": "number", "minimum": 1, "default": 1.1,
                      "description": "FastFlow offloads only if the GPU's rate / the local rate reaches this."},
        "ratios": {"type": "array", "minItems": 1, "items": {"type": "number", "minimum": 0, "maximum": 1},
                   "contains": {"const": 0}, "default": [0.0, 0.25, 0.5, 0.75, 1.0],
                   "description": "The fixed off-ratios swept (0 = local only, 1 = remote only); must hold 0."},
        "candidates": {"type": "array", "minItems": 1, "items": {"enum": ["p'1", "p'2", "p'3"]},
                       "default": ["p'2", "p'3"], "description": "The remote pipelines FastFlow may choose."},
        "noise": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.05,
                  "description": "FastFlow may fall this fraction below TF-NO and still pass."},
        "ratio_tolerance": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.25,
                            "description": "FastFlow's ratio is near the sweep's best if within this..."},
        "best_fraction": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.9,
                          "description": "... or if its rate reaches this fraction of the best's."},
        "timeout_s": {"type": "number", "minimum": 10, "maximum": 3600, "default": 180,
                      "description": "Seconds a trainer run may take."},
        "repeats": {"type": "integer", "minimum": 1, "maximum": 9, "default": 3,
                    "description": "Runs per policy, interleaved; medians are reported with their spread."},
        "epoch_steps": {"type": "integer", "minimum": 1, "default": 1000,
                        "description": "The steps of the epoch whose time is reported."},
    },
}


DISPATCHER_PORT, WORKER_PORT = 5050, 5051
DEFAULTS = {"pipelines": ["compute"], "gpu_steps_per_s": 25, "local_cores": 0.3,
            "worker_cores": 0.3, "seconds": 6, "profile_s": 3, "warmup_s": 1.5, "threshold": 1.1,
            "ratios": [0.0, 0.25, 0.5, 0.75, 1.0], "candidates": ["p'2", "p'3"],
            "noise": 0.05, "ratio_tolerance": 0.25, "best_fraction": 0.9, "timeout_s": 180,
            "repeats": 3, "epoch_steps": 1000}


def tensorflow_installed() -> bool:
    """Whether the venv has TensorFlow, an optional extra (requirements-tf.txt), without importing it (seconds)."""
    try:
        return importlib.util.find_spec("tensorflow") is not None
    except (ImportError, ValueError):           # ValueError: blocked (sys.modules["tensorflow"] is None)
        return False


def validate(fabric, spec: dict, scenario: dict | None = None) -> dict:
    """The spec with its defaults filled in; ScenarioError for what this fabric (or host backend) cannot run."""
    scenario = scenario or {}
    if scenario.get("hosts", "netns") == "docker":
        if scenario.get("host_image", "default") not in ("default", "tf") and ":" not in scenario["host_image"]:
            raise ScenarioError(f"offload runs TensorFlow, which host_image {scenario['host_image']} does not "
                                "carry; use host_image tf (the default for offload) or an image of yours with it")
    elif not tensorflow_installed():
        raise ScenarioError("offload needs TensorFlow, an optional extra: run `make setup EXTRAS=tf` "
                            "(scripts/setup --extras tf)")
    cpus = cpu_hosts(fabric)
    if not cpus:
        raise ScenarioError("offload needs CPU hosts for tf.data.service: set fabric.cpu_hosts >= 1")
    gpus = sorted(fabric.gpus(), key=lambda h: (h.server, h.rank))     # a concurrent job's: its placement's
    s = {**DEFAULTS, "trainer": gpus[0].name, "cpu_hosts": cpus, **spec}
    if s["trainer"] not in {h.name for h in gpus}:
        raise ScenarioError(f"offload trainer {s['trainer']!r} is not a GPU host of this fabric")
    unknown = [h for h in s["cpu_hosts"] if h not in cpus]
    if unknown:
        raise ScenarioError(f"offload cpu_hosts: {unknown[0]!r} is not a CPU host of this fabric "
                            f"({', '.join(cpus)}; fabric.cpu_hosts sets how many)")
    if len(set(s["cpu_hosts"])) != len(s["cpu_hosts"]):
        raise ScenarioError("offload cpu_hosts: a host is listed twice")
    return s


def cpu_hosts(fabric) -> list[str]:
    """The fabric's CPU hosts, cpu0 first."""
    return sorted((h.name for h in fabric.hosts.values() if h.kind == "cpu"), key=lambda h: int(h[3:]))


def service_line_problem(line: bytes) -> str | None:
    """What is wrong with a server's serving line (hosts/spec/results.py), or None."""
    try:
        doc = json.loads(line)
    except ValueError:
        return f"not JSON: {line[:80]!r}"
    return agent_results.problem("hosts.agents.tfdata_service", doc)


class Servers:
    """A dispatcher on the first CPU host and a worker on every CPU host, killed by PID on exit."""

    def __init__(self, net, cpu_hosts: list[str], worker_cores: float, start_timeout: float = 60.0):
        self.net, self.hosts, self.cores, self.start_timeout = net, cpu_hosts, worker_cores, start_timeout
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict = {}
        self.where: dict[str, str] = {}            # key -> host, for the logs kept in the results folder
        self.ip = net.fabric.hosts[cpu_hosts[0]].ip

    def _start(self, key: str, host: str, args: list[str]) -> None:
        err = self.logs[key] = tempfile.TemporaryFile(prefix="tb-tfdata-")   # TF logs a lot to stderr
        self.where[key] = host
        node = self.net.host(host)
        self.procs[key] = node.popen([node.python, "-m", "hosts.agents.tfdata_service", *args],
                                                    cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=err)

    def __enter__(self) -> "Servers":
        self._start("dispatcher", self.hosts[0], ServiceSpec(role="dispatcher", port=DISPATCHER_PORT).to_argv())
        for h in self.hosts:
            worker = ServiceSpec(role="worker", port=WORKER_PORT, ip=self.net.fabric.hosts[h].ip,
                                 dispatcher=f"{self.ip}:{DISPATCHER_PORT}")
            self._start(f"worker-{h}", h, worker.to_argv())
        deadline = time.monotonic() + self.start_timeout
        for key, proc in self.procs.items():          # each prints one line when serving
            ready, _, _ = select.select([proc.stdout], [], [], max(0.1, deadline - time.monotonic()))
            line = proc.stdout.readline() if ready else b""
            if line and (bad := service_line_problem(line)):
                self.__exit__()
                raise RuntimeError(f"tf.data.service {key} printed a line its schema rejects: {bad}")
            if not line:
                if ready:                                # its stdout closed: it is exiting
                    try:
                        proc.wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        pass
                how = f"exit {proc.poll()}" if proc.poll() is not None else f"not serving after {self.start_timeout:.0f} s"
                why = self.last_error(key)              # before __exit__ closes the logs
                self.__exit__()
                raise RuntimeError(f"tf.data.service {key} did not start ({how}): {why}")
            if key.startswith("worker-"):             # once TensorFlow is up: its start is not the budget's
                budget.limit(f"{os.getpid()}-{key}", process_id(proc), self.cores, within=within(self.net, key[7:]))
        return self

    def last_error(self, key: str) -> str:
        log = self.logs[key]
        log.seek(0)
        lines = [l for l in log.read().decode(errors="replace").splitlines() if l.strip()]
        return lines[-1] if lines else "no output"

    @property
    def service(self) -> str:
        return f"grpc://{self.ip}:{DISPATCHER_PORT}"

    def worker_cpu_s(self) -> float:
        return sum(budget.cpu_seconds(process_id(p)) for k, p in self.procs.items() if k.startswith("worker"))

    def __exit__(self, *exc) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        for key, log in self.logs.items():
            log.seek(0)
            hostlogs.keep(self.net, self.where[key], "hosts.agents.tfdata_service",
                          getattr(self.procs.get(key), "returncode", None), "",
                          log.read().decode(errors="replace"))
            log.close()
        for h in self.hosts:
            budget.remove(f"{os.getpid()}-worker-{h}", within=within(self.net, h))


def within(net, host: str) -> str | None:
    """Where a process's CPU budget group goes: in a Docker host, under its container's cgroup (so that the
    container's own limits hold too); on namespaces, None (the hierarchy's root)."""
    pid = getattr(net.host(host), "container_pid", None)
    return None if pid is None else budget.hierarchy().of_process(pid)


def rx_bytes(net, host: str) -> int:
    """Bytes received on the host's interfaces (all but lo), from /proc/net/dev in its namespace."""
    total = 0
    for line in net.host(host).cmd("cat /proc/net/dev").splitlines()[2:]:
        name, _, rest = line.partition(":")
        if name.strip() != "lo" and rest.split():
            total += int(rest.split()[0])
    return total


def run_trainer(net, host: str, spec: TrainerSpec, cores: float, timeout: float) -> dict:
    """The trainer process, its local CPU budget applied by PID once TensorFlow is imported (before any
    preprocessing: the trainer waits for the go on its stdin)."""
    group = f"{os.getpid()}-trainer-{host}"          # unique: other runs may be up at the same time
    node, parent = net.host(host), within(net, host)
    proc = node.popen([node.python, "-m", "hosts.agents.tfdata_trainer",
                                 dataclasses.replace(spec, start_signal=True).to_json()], cwd=PROJECT_ROOT,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    try:
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        applied = {}    # unless it gets there: it exited before it was ready, its stderr says why below
        if ready and proc.stdout.readline().strip():
            try:
                applied = budget.limit(group, process_id(proc), cores, within=parent)
                proc.stdin.write("go\n")
                proc.stdin.flush()
            except (CgroupError, BrokenPipeError):
                if proc.poll() is None:          # alive: the budget itself failed
                    raise
        out, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
        hostlogs.keep(net, host, "hosts.agents.tfdata_trainer", proc.returncode, out, err)
        try:
            result = json.loads(out.strip().splitlines()[-1])
            if result.get("ready"):
                raise ValueError("no result after the ready line")
        except (ValueError, IndexError):
            raise RuntimeError(f"trainer on {host} exited {proc.returncode}: "
                               f"{(err.strip().splitlines() or ['no output'])[-1]}") from None
        bad = agent_results.problem("hosts.agents.tfdata_trainer", result)
        if bad:
            raise RuntimeError(f"trainer on {host} printed a result its schema rejects: {bad}")
        return result | {"throttled_s": round(budget.throttled_s(group, within=parent), 3),
                         "cgroup": applied.get("cgroup"), "cgroup_parent": parent}
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"trainer on {host} still running after {timeout:.0f} s") from None
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        budget.remove(group, within=parent)


def with_servers(net, s: dict, trainer: TrainerSpec) -> tuple[dict, dict]:
    """One trainer run against freshly started servers; returns its output and what was measured around it."""
    # TensorFlow takes ~10 s to start here, minutes under software emulation: its start shares the run's budget
    with Servers(net, s["cpu_hosts"], s["worker_cores"], start_timeout=max(60.0, s["timeout_s"] / 3)) as servers:
        trainer = dataclasses.replace(trainer, service=servers.service)
        rx0, w0 = rx_bytes(net, s["trainer"]), servers.worker_cpu_s()
        with CpuSampler() as idle:        # the trainer's run, not the servers' start-up
            out = run_trainer(net, s["trainer"], trainer, s["local_cores"], s["timeout_s"])
        around = {"rx": rx_bytes(net, s["trainer"]) - rx0, "worker_cpu_s": servers.worker_cpu_s() - w0}
    return out, around | idle.report()


def plan(s: dict) -> list[tuple[str, float | None, str | None]]:
    """One round: (policy, ratio, candidate) of FastFlow and of every sweep point; ratio 0 runs once (local
    only: no candidate), every other ratio once per candidate."""
    runs = [("fastflow", None, None), (compare.fixed_policy(0, None), 0.0, None)]
    for candidate in s["candidates"]:
        runs += [(compare.fixed_policy(r, candidate), float(r), candidate) for r in s["ratios"] if r > 0]
    return runs


def one_run(net, s: dict, pipeline: str, policy: str, ratio: float | None, candidate: str | None = None,
            seed: int = 0) -> dict:
    """A fixed-ratio run, or FastFlow: profile and decide, restart the servers, train with the decision."""
    trainer = TrainerSpec(pipeline=pipeline, policy="fixed", gpu_steps_per_s=s["gpu_steps_per_s"],
                          seconds=s["seconds"], profile_s=s["profile_s"], warmup_s=s["warmup_s"],
                          threshold=s["threshold"], candidates=tuple(s["candidates"]),
                          pipeline_cfg=s.get("pipeline_cfg", {}).get(pipeline), seed=seed,
                          candidate=candidate or compare.baseline_candidate(s["candidates"]))
    extra, profile_s = {}, 0.0
    if policy == "fastflow":
        prof, _ = with_servers(net, s, dataclasses.replace(trainer, policy="profile"))
        d = prof["decision"]
        ratio = d["off_ratio"]
        trainer = dataclasses.replace(trainer, candidate=d["pipeline"] or trainer.candidate)
        profile_s = prof["profile"]["wall_s"]
        extra = {"profile": _profile_summary(prof["profile"]), "decision": d}
    out, fid = with_servers(net, s, dataclasses.replace(trainer, ratio=ratio))
    epoch_s = profile_s + s["epoch_steps"] / max(1e-9, out["steps_per_s"])
    return {"type": "offload", "policy": policy, "pipeline": pipeline, "throughput_eps": round(out["throughput_eps"], 2),
            "steps_per_s": round(out["steps_per_s"], 3), "profile_s": profile_s,
            "epoch_s_with_profiling": round(epoch_s, 2), "off_ratio": round(out["off_ratio"], 3),
            "candidate": out.get("candidate"), "seed": seed,
            "metrics": {"measured_ratio": round(out["measured_ratio"], 3), "local_cpu_cores": round(out["cpu_cores"], 3),
                        "local_cpu_per_step_s": round(out["cpu_per_step"], 4), "local_throttled_s": out["throttled_s"],
                        "local_cgroup_parent": out["cgroup_parent"],
                        "worker_cpu_s": round(fid["worker_cpu_s"], 2), "trainer_rx_bytes": fid["rx"],
                        "cpu_idle_mean_pct": fid["cpu_idle_mean_pct"], "cpu_bound": fid["cpu_bound"], **extra}}


def _profile_summary(p: dict) -> dict:
    return {"Gthp": round(p["Gthp"], 3), "Lthp": round(p["Lthp"], 3), "Pcycle": round(p["Pcycle"], 5),
            "candidates": {k: {"Rthp": round(v["Rthp"], 3), "Ocycle": round(v["Ocycle"], 5)}
                           for k, v in p["candidates"].items()}}


def row_line(r: dict) -> str:
    """One run, printed as it ends."""
    m = r["metrics"]
    return (f"{r['pipeline']:8} {r['policy']:15} {r['off_ratio']:5.2f} {r['steps_per_s']:8.2f} "
            f"{r['epoch_s_with_profiling']:8.1f} {m['local_cpu_cores']:9.2f} {m['worker_cpu_s']:12.1f} "
            f"{m['trainer_rx_bytes'] / 1e6:7.1f} {m['cpu_idle_mean_pct'] if m['cpu_idle_mean_pct'] is not None else '-':>6}"
            + ("  CPU-BOUND" if m["cpu_bound"] else ""))


ROW_HEADER = (f"{'pipeline':8} {'policy':15} {'ratio':>5} {'steps/s':>8} {'epoch s':>8} {'local CPU':>9} "
              f"{'worker CPU s':>12} {'rx MB':>7} {'idle %':>6}")


def run(net, spec: dict) -> dict:
    s = validate(net.fabric, spec, {"hosts": net.backend.name, "host_image": getattr(net.backend, "image", "default")})
    rows = []
    print(ROW_HEADER, flush=True)
    for seed in range(s["repeats"]):                # rounds interleaved: load drift falls on every policy
        for pipeline in s["pipelines"]:
            for policy, ratio, candidate in plan(s):
                rows.append(one_run(net, s, pipeline, policy, ratio, candidate, seed))
                print(row_line(rows[-1]), flush=True)
    policies = compare.aggregate(rows)
    checks = [c for p in s["pipelines"] for c in compare.checks(p, [r for r in rows if r["pipeline"] == p],
                                                                 policies, s)]
    for p in policies:
        no = next(x for x in policies if x["pipeline"] == p["pipeline"] and x["policy"] == "ratio=0")
        p["speedup_vs_tf_no"] = round(no["epoch_s"]["median"] / p["epoch_s"]["median"], 3)
    bound = [r for r in rows if r["metrics"]["cpu_bound"]]     # a figure: the fidelity guard's count
    return {"type": "offload", "ok": all(c["ok"] for c in checks), "rows": rows, "policies": policies,
            "checks": checks, "cpu_bound_runs": len(bound), "candidates": s["candidates"],
            "epoch_steps": s["epoch_steps"], "trainer": s["trainer"], "cpu_hosts": s["cpu_hosts"]}


def summary(w: dict) -> str:
    """One line for the run summary: FastFlow's choice and speed-up per pipeline (medians, profiling included)."""
    parts = []
    for p in w["policies"]:
        if p["policy"] == "fastflow":
            parts.append(f"{p['pipeline']}: fastflow {p['candidate'] or 'no offload'} ratio {p['off_ratio']['median']:.2f}, "
                         f"{p['steps_per_s']['median']:.2f} steps/s [{p['steps_per_s']['min']:.2f}-"
                         f"{p['steps_per_s']['max']:.2f}], x{p['speedup_vs_tf_no']:.2f} vs tf-no with profiling")
    return "; ".join(parts)


def warnings(fabric, spec: dict) -> list[str]:
    """Baselines the sweep will not contain, and a comparison without spread."""
    s = {**DEFAULTS, **spec}
    out = [f"ratios has no {r:g}: the {name} baseline will be missing from the comparison"
           for r, name in ((0.5, "TF-DSLR"), (1.0, "TF-DSR")) if r not in s["ratios"]]
    if s["repeats"] < 3:
        out.append(f"repeats {s['repeats']}: medians of fewer than 3 runs, the spread says little")
    return out


def tables(w: dict) -> list[str]:
    """Per pipeline: TF-NO, TF-DSLR, TF-DSR, the sweep's best and FastFlow, medians with their spread."""
    pipelines = list(dict.fromkeys(p["pipeline"] for p in w["policies"]))
    return [compare.comparison_table(p, w["policies"], w["candidates"], w["epoch_steps"]) for p in pipelines]


def start_line(spec: dict) -> str:
    return "offload"


def report_section(workloads: list[dict]) -> list[str]:
    return []


def report_plots(workloads: list[dict], plots_dir: str) -> list[str]:
    return []
