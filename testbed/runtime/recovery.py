"""The job manager's side of GPU-failure recovery, for one collective job.

The ranks detect a failed peer (heartbeats over the network, the progress watchdog, or the transport) and agree among themselves on who failed
and on the step to resume from: the ranks write epoch E's verdict in the job's store (the keys:
hosts/recovery/membership.py).
This manager, a thread in the testbed, watches for that verdict and then
  - fences the failed ranks: whatever is left of their processes is killed, so that a hung or stalled rank,
    or one cut off the network, cannot come back into a job that has moved on;
  - `shrink`: nothing more; the survivors have written the new membership themselves;
  - `spare`: puts, in each failed rank's place, an idle spare GPU of the same server (HB domain),
    re-cabled onto the failed GPU's rail and enabled (testbed.fabric.spares), and starts its rank process with
    the launcher; it joins epoch E with the failed rank's number, and so its input;
  - `migrate`: moves every rank of a server that lost a GPU to an idle spare server (GPU j to GPU j,
    their rail ports enabled) and starts the rank processes there; the server's surviving ranks leave;
and for `spare` / `migrate` writes epoch E's new membership, which the ranks wait for.
A GPU that comes back (the faults gpu-restart and nic-up, through testbed.faults.returns.restart_hooks) gets its rank process
started again once the job has dropped it (fenced, no longer a member); the rank asks to rejoin and the job
admits it at its next step boundary (hosts/agents/collective_rank.py).
When no spare is left, the membership carries an error and the ranks fail with it. Spares brought onto
the network are parked again (ports disabled) when the job ends. Jobs that run together share the spares
through the network's ledger (testbed.fabric.spares.Ledger): a spare this job takes is not offered to another
job until this one ends.
"""
from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time

from hosts.collectives.store import FileStore
from hosts.spec.peers import Member
from hosts.spec.rank import CollectiveRankSpec, Join, Rejoin
from hosts.recovery.membership import Membership, admit, member_entry, spare_spec_path
from testbed.fabric import spares
from testbed.faults import signals
from testbed.faults.returns import restart_hooks
from testbed.runtime import exits
from testbed.runtime.launch import run_on_hosts

RANK_MODULE = signals.RANK_PROGRAM
rank_processes = signals.rank_processes


def fence(net, host: str) -> int:
    """Kill what is left of a failed rank (a Docker host's container is killed, as its failures are)."""
    failed = net.host(host).fail(signal.SIGKILL)
    if failed is not None:
        return failed
    return net.host(host).signal(rank_processes(net, host), signal.SIGKILL)


def member(host, local_rank: int) -> dict:
    """A rank's entry in a membership: where it runs."""
    return member_entry(host.name, host.ip, host.hb_ip, host.server, local_rank)


class JobManager:
    def __init__(self, net, base_spec: CollectiveRankSpec, store: str, members: list[dict], budget: float):
        self.net, self.fabric = net, net.fabric
        self.policy = base_spec.recovery
        self.base_spec, self.store = base_spec, store
        self.job = Membership(FileStore(store, timeout=base_spec.timeout_s))
        self.members = [dict(m) for m in members]
        self.deadline = time.monotonic() + budget
        self.used = {m["name"] for m in members}            # hosts that run, or ran, a rank of this job
        self.activated: list[str] = []                       # spares brought onto the network
        self.ledger = getattr(net, "spares_held", None) or spares.Ledger()   # shared with the jobs beside it
        self.fenced: set[str] = set()
        self.outputs: dict[str, dict] = {}                   # spare host -> its rank's output
        self.errors: list[str] = []
        self.events: list[dict] = []
        self.entries = {m["name"]: dict(m) for m in members}     # host -> its last member entry
        self.restarts: list[dict] = []                           # {"host", "requested_at", "launched_at"}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._thread = threading.Thread(target=self._run, daemon=True, name="tb-recovery")

    def start(self) -> "JobManager":
        if self.base_spec.admit:
            restart_hooks.append(self.rejoin)
        self._thread.start()
        return self

    def running(self) -> bool:
        """Whether the job lives on in ranks this manager started (spares, GPUs that came back), or a GPU that
        came back still waits for its rank to be started."""
        with self._lock:
            waiting = any(r["launched_at"] is None for r in self.restarts)
        return waiting or any(t.is_alive() for t in self._threads)

    def stop(self) -> None:
        """Stop watching; wait for the spares' rank processes; park the spares again."""
        self._stop.set()
        self._thread.join()
        if self.rejoin in restart_hooks:
            restart_hooks.remove(self.rejoin)
        for name in self.job.join_requests():       # the job has ended: no one is admitted any more
            self.job.answer_join(name, {"error": "the job had ended"})
        for t in self._threads:
            t.join(max(1.0, self.deadline - time.monotonic()))
        for host in self.activated:
            try:
                spares.park(self.net, host)
            except spares.SpareError as exc:
                self.errors.append(f"{host}: parking failed: {exc}")
        self.ledger.release(self.store)

    # -- GPUs that come back -------------------------------------------------------------------
    def rejoin(self, host: str) -> int:
        """A GPU of this job came back: its rank is started again once the job has dropped it. Returns 1 if
        the host is this job's (0: not ours)."""
        if host not in self.used or self._stop.is_set():
            return 0
        with self._lock:
            self.restarts.append({"host": host, "requested_at": time.time(), "launched_at": None})
        return 1

    def _restart_dropped(self) -> None:
        """Start the rank of every GPU that came back and that the job no longer counts as a member."""
        members = {m["name"] for m in self.members}
        with self._lock:
            due = [r for r in self.restarts if r["launched_at"] is None and r["host"] not in members
                   and r["host"] in self.fenced]
        for r in due:
            r["launched_at"] = time.time()
            entry = self.entries[r["host"]]
            path = os.path.join(self.store, f"rejoin-{r['host']}-{len(self.restarts)}.json")
            order = [p.name for p in self.base_spec.peers]
            slot = order.index(r["host"]) if r["host"] in order else len(order)
            self._start_rank(r["host"], path, dataclasses.replace(self.base_spec, rank=slot,
                                                                  rejoin=Rejoin(me=Member(**entry))))

    # -- the watcher ----------------------------------------------------------------------------
    def _run(self) -> None:
        epoch = 1
        while not self._stop.is_set():
            self._restart_dropped()
            if not self.job.has_verdict(epoch):
                self._stop.wait(0.01)
                continue
            verdict = self.job.verdict(epoch)
            event = {"epoch": epoch, "failed": verdict["failed"], "seen_at": time.time()}
            for name in verdict["failed"]:
                fence(self.net, name)
                self.fenced.add(name)
            if self.policy == "shrink" or not verdict["failed"]:     # the ranks wrote it (shrink, or only growth)
                decision = self.job.members(epoch, timeout=30)
            else:
                try:
                    decision = {**verdict, **self._replace(epoch, verdict, event)}
                except spares.SpareError as exc:
                    decision = {**verdict, "error": f"{self.policy}: {exc}"}
                self.job.set_members(epoch, decision)
                for name in verdict.get("joined", []):
                    self.job.answer_join(name, {"epoch": epoch} if "error" not in decision else decision)
                event["members_at"] = time.time()
            event["joined"] = verdict.get("joined", [])
            self.events.append(event)
            if "error" in decision:
                return
            self.members = decision["members"]
            self.entries.update({m["name"]: dict(m) for m in self.members})
            epoch += 1

    def _replace(self, epoch: int, verdict: dict, event: dict) -> dict:
        """The new membership with spares in the failed ranks' places; starts their processes first, so
        that they load while the spares are re-cabled."""
        members = [dict(m) for m in self.members]
        failed = set(verdict["failed"])
        places: dict[int, object] = {}                       # slot -> the spare host taking it
        if self.policy == "spare":
            for server in {m["server"] for m in members if m["name"] in failed}:
                if all(m["name"] in failed for m in members if m["server"] == server):
                    raise spares.SpareError(f"every GPU of server {server} failed: the server is down and its "
                                            f"spare GPUs with it (recovery migrate moves to a spare server)")
            for slot, m in enumerate(members):
                if m["name"] in failed:
                    places[slot] = self._idle_spare_gpu(m, taken={h.name for h in places.values()})
        else:
            taken: set[int] = set()
            for server in sorted({m["server"] for m in members if m["name"] in failed}):
                target = self._idle_spare_server(server, taken)
                taken.add(target)
                for slot, m in enumerate(members):
                    if m["server"] == server:
                        places[slot] = self.fabric.hosts[f"s{target}g{m['local_rank']}"]
        replaced, moved = {}, {}
        for slot, host in places.items():
            old = members[slot]
            members[slot] = member(host, old["local_rank"])
            self.used.add(host.name)
            replaced[old["name"]] = host.name
            if old["name"] not in failed:
                moved[old["name"]] = f"migrated to {host.name} with its server"
            self._launch(host.name, members[slot], slot, epoch)
        t0 = time.monotonic()
        for slot, host in places.items():
            spares.activate(self.net, host.name, spares.leaf_of(self.fabric, host.server, members[slot]["local_rank"]))
            self.activated.append(host.name)
        event.update(replaced=replaced, activation_s=round(time.monotonic() - t0, 4))
        members = admit(members, list(verdict.get("joining", {}).values()), [p.name for p in self.base_spec.peers])
        return {"members": members, "replaced": replaced, "moved": moved}

    def _idle_spare_gpu(self, failed: dict, taken: set):
        """An idle spare GPU of the failed GPU's server that no other job holds; this job takes it."""
        own = [h for h in self.fabric.spares() if h.server == failed["server"] and h.rank is None]
        for host in own:
            if host.name not in self.used | taken and self.ledger.take([host.name], self.store):
                return host
        held = sum(1 for h in own if not self.ledger.free(h.name, self.store))
        raise spares.SpareError(f"no idle spare GPU left in {failed['name']}'s HB domain (server "
                                f"{failed['server']} has {len(own)}, all in use"
                                + (f"; {held} held by other jobs" if held else "") + ")")

    def _idle_spare_server(self, failed_server: int, taken: set) -> int:
        """An idle spare server no other job holds a GPU of; this job takes it whole."""
        servers = sorted({h.server for h in self.fabric.spares() if h.rank is not None})
        for s in servers:
            hosts = [h.name for h in self.fabric.spares() if h.server == s]
            if s not in taken and not set(hosts) & self.used and self.ledger.take(hosts, self.store):
                return s
        raise spares.SpareError(f"no idle spare server left to migrate server {failed_server} to "
                                f"({len(servers)} spare servers, all in use by this job or another)")

    def _launch(self, host: str, me: dict, slot: int, epoch: int) -> None:
        self._start_rank(host, spare_spec_path(self.store, host, epoch),
                         dataclasses.replace(self.base_spec, rank=slot, join=Join(epoch=epoch, me=Member(**me))))

    def _start_rank(self, host: str, path: str, spec: CollectiveRankSpec) -> None:
        """A rank process on `host` with this spec, by the launcher, in a thread (its output: self.outputs)."""
        spec.save(path)
        exits.restarting(self.store, host)

        def run() -> None:
            out, errors = run_on_hosts(self.net, {host: [RANK_MODULE, path]},
                                       timeout=max(5.0, self.deadline - time.monotonic()), partial=True,
                                       on_exit=exits.reporter(self.store))
            self.outputs.update(out)
            self.errors += errors
        t = threading.Thread(target=run, daemon=True, name=f"tb-spare-{host}")
        t.start()
        self._threads.append(t)
