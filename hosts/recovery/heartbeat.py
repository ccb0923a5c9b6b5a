"""Communicator heartbeats over the emulated network: how a rank learns, within about a second, that a peer
crashed, hung, stalled, lost its NIC or cable, or was cut off.

Every rank sends a beat every `period` seconds from its own thread, over the network, to its neighbours on
each one-hop path (beats.py: the NIC to its rail, the HB domain to its server; two per path, in rings of the
job's order), and watches the beats coming back on each of those paths. A peer silent on a path for
`timeout` seconds is declared failed: a crashed process (SIGKILL), a stopped one (SIGSTOP), a dead NIC or
cable and a partition all look like that, long before the transport's retransmission timers give up. A
peer whose beats go on but whose progress count stands still while this rank waits on it is stalled
(watchdog.py: a hung kernel).

A rank sees only its neighbours; what it found out first hand it writes to its news file in
the job's store directory (NEWS), and reads its peers' news every beat: so a failure reaches the ranks of
other rails and servers within a beat of its first detection, as TorchFT's lighthouse or c10d's store
carry it. Detection itself always comes from the network or the watchdog; the news only carries it.
News is written by replacing a file, which moves the directory's mtime: a watcher reads its peers' files
only when that moved (64 ranks stat-ing 65 files each every beat took a tenth of two cores), and whole once
a timeout whatever it says (a shared file system may cache a directory's attributes).

Silence is measured on the watcher's own monotonic clock, from the last beat heard, so the ranks' clocks
need not agree. A watcher that was itself starved (its loop late by more than half the timeout, and by more
than a period: the machine was busy, or the process was stopped) restarts every clock instead of blaming
anyone. A path
never heard yet (a spare still starting) gets `join_grace` seconds. A rank that leaves the job normally
sends LEFT, so its silence afterwards is no failure; a rank whose GPU is declared failed sends DECLARED,
and is failed at once.

A rank that dies before its beats reach anyone (killed while starting or in rendezvous, before the
communicator watched its peers) would be given the join grace. Its launcher sees its process end without
a result, as torchelastic's agent or a cluster scheduler sees a worker's exit, and says so in the job's
news under its own name (LAUNCHER, report_exit): every watcher reads that file too, and fails within a
beat a rank that never beat. A rank marks in the directory (BEATING) that its beats go out, once the first
has left: from then on its silence tells, so detection stays the network's; except to a watcher with direct
paths to it that has heard it on none (its first beats left but never arrived), which takes the launcher's
word. The launcher takes its word back when it starts the rank again, and the rank its mark.
"""
from __future__ import annotations

import json
import os
import threading
import time
from typing import Callable

from hosts.recovery import beats
from hosts.recovery.watchdog import Watchdog

NEWS = "news-{name}.json"
LAUNCHER = "launcher"          # the news of the processes' launcher: ranks whose process ended (report_exit)
BEATING = "beating-{name}"     # a rank's mark, once its beats go out: the launcher's word no longer applies
# file timestamps come from a coarse clock (a jiffy, up to 10 ms): a directory whose mtime is this close to the
# start of the read that saw it may change again within the same tick, so that read proves nothing
NEWS_TICK_NS = 20_000_000


class Heartbeat:
    def __init__(self, directory: str, me: dict, period: float = 0.15, timeout: float = 1.0,
                 join_grace: float = 30.0, stall: float = 2.0):
        """me: this rank's member entry (name, ip, hb_ip, server, local_rank); directory: where news is shared."""
        if not 0 < period < timeout:
            raise ValueError(f"heartbeat period {period} s must be positive and shorter than its timeout {timeout} s")
        self.directory, self.me, self.name = directory, dict(me), me["name"]
        self.period, self.timeout, self.join_grace = period, timeout, join_grace
        os.makedirs(directory, exist_ok=True)
        self._socks = beats.open_sockets(self.me)
        self.watchdog = Watchdog(stall)
        self._count, self._flags = 0, 0
        self._lock = threading.Lock()
        self._known: dict[str, dict] = {}          # name -> member entry (addresses), from meet()
        self._peers: dict[str, dict] = {}          # watched name -> {left, declared, readmitted (wall time)}
        self._links: dict[tuple, dict] = {}        # (name, path) -> {addr, since (monotonic), heard}
        self._targets: list[tuple[str, str]] = []   # (path, address) our beats go to
        self._lingering: dict[tuple, tuple] = {}   # (name, path) -> (address, until): dropped from the rings
        self._failed: dict[str, dict] = {}         # name -> {silence, at (wall), why, by, first_hand}
        self._news_seen: dict[str, tuple] = {}     # reporter -> (inode, mtime ns, size) of its news last read
        self._news_dir = (None, 0, 0.0)   # the directory's mtime at the last full read, that read's start (wall
        #                                   ns), and when the next full read is due whatever (monotonic)
        self.on_failure: Callable[[], None] | None = None       # called from the heartbeat thread
        self.max_silence = 0.0       # longest a live peer's path stood still (the margin to `timeout`)
        self.max_loop_gap = 0.0      # longest gap between two of our own beats (our own starvation)
        self.send_errors = 0         # beats the network refused (our own port down)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="tb-heartbeat")

    # -- what the rank program and the communicator use ----------------------------------------
    def start(self) -> "Heartbeat":
        # a rank that comes back must not let its peers read the verdicts of its previous life (a cut-off
        # rank found everyone failed): its news starts empty, and it has not beaten in this life
        self._publish_news()
        try:
            os.remove(self._beating_path(self.name))
        except FileNotFoundError:
            pass
        self._beat()
        self._thread.start()
        return self

    def meet(self, members) -> None:
        """The addresses of the job's members (entries with name, ip, hb_ip, server, local_rank)."""
        with self._lock:
            self._known.update({m["name"]: dict(m) for m in members})

    def watch(self, names) -> None:
        """Watch exactly these members (the job's, in its order, this rank among them) from now on: beats go to
        and come from this rank's neighbours on each path (beats.watched); the others are watched through
        their watchers' news. Links kept from the previous set keep their clocks; a peer the job has just
        agreed is alive starts with a clean record. A neighbour dropped from the rings (the membership
        changed) still gets beats for `join_grace` seconds: it may not have re-formed yet, and would take
        our silence for a failure."""
        now, wall, order = time.monotonic(), time.time(), list(names)
        names = [n for n in order if n != self.name]
        with self._lock:
            for name in names:
                if name not in self._peers or name in self._failed:
                    # first watched: news of its current life counts, even from before now (_admitted_at)
                    self._peers[name] = {"left": False, "declared": False, "readmitted": wall,
                                         "first": name not in self._peers}
                self._failed.pop(name, None)
            for name in set(self._peers) - set(names):
                del self._peers[name]
            members = [self.me if n == self.name else self._known[n] for n in order
                       if n == self.name or n in self._known]
            wanted = {(name, path): addr for name, path, addr in beats.watched(self.me, members)} if names else {}
            for key, addr in wanted.items():
                self._links.setdefault(key, {"addr": addr, "since": now, "heard": False})
            if names:      # done watching (names empty): beat on to the last members until we stop
                kept = {key: v for key, v in self._lingering.items() if key not in wanted and v[1] > now}
                dropped = {key: (link["addr"], now + self.join_grace)
                           for key, link in self._links.items() if key not in wanted}
                self._lingering = {**kept, **dropped}    # replaced, not changed: the beating thread reads it unlocked
                self._links = {key: link for key, link in self._links.items() if key in wanted}
                self._targets = [(path, link["addr"]) for (_, path), link in self._links.items()]
            else:
                self._links = {}
            self.watchdog.forget(self._peers)
            self._news_seen.pop(LAUNCHER, None)      # read again for the peers now watched
            self._news_dir = (None, 0, 0.0)
            if names:     # done watching: what it found stays published for the watchers that have not read it yet
                self._publish_news()
        if names and not os.path.exists(self._beating_path(self.name)):
            self._beat()              # the first beat out, then the mark that beats flow (the launcher's word)
            open(self._beating_path(self.name), "w").close()

    def progress(self, waiting: bool) -> None:
        """This rank moved on (watchdog.py); `waiting`: it now waits on its peers."""
        self.watchdog.step(waiting)

    def failed(self) -> dict[str, tuple[float, float]]:
        """Watched peers declared failed, first hand or by news: name -> (seconds silent or still, wall time)."""
        with self._lock:
            return {n: (f["silence"], f["at"]) for n, f in self._failed.items() if n in self._peers}

    def suspects(self) -> dict[str, str]:
        """Peers this rank itself found failed (not told by news): name -> how (heartbeats, watchdog, declared)."""
        with self._lock:
            return {n: f["by"] for n, f in self._failed.items() if n in self._peers and f["first_hand"]}

    def hears(self) -> list[str]:
        """Peers whose beats arrived on a direct path within the last half timeout, and not known stalled or
        declared: their process is alive, whatever others say of the paths they cannot hear it on."""
        now = time.monotonic()
        with self._lock:
            return sorted({n for (n, _), link in self._links.items() if link["heard"]
                           and now - link["since"] < self.timeout / 2
                           and self._failed.get(n, {}).get("by") not in ("watchdog", "declared")})

    def alive_since_failed(self, name: str) -> bool:
        """Whether the peer wrote its news after it fell silent (it found others failed, or joined a new
        membership): its process lives, cut off from us, while a dead one's last news predates its silence.
        A peer declared failed, or whose process ended, is not alive whenever it last wrote (news written at
        its communicator's start, just before a declaration, would otherwise keep the job from deciding)."""
        with self._lock:
            f, written = self._failed.get(name), self._news_seen.get(name)
        return f is not None and f["by"] not in ("declared", "exit") and written is not None \
            and written[1] / 1e9 >= f["at"] - self.timeout

    def why(self, name: str) -> str | None:
        with self._lock:
            f = self._failed.get(name)
        return None if f is None else f["why"]

    def detected_by(self, name: str) -> str | None:
        with self._lock:
            f = self._failed.get(name)
        return None if f is None else f["by"]

    def failure(self) -> str | None:
        """One line naming the first failed peer, or None."""
        failed = self.failed()
        if not failed:
            return None
        name = min(failed, key=lambda n: failed[n][1])
        return f"{name} {self.why(name)}"

    def was_declared(self, name: str) -> bool:
        """Whether the peer's GPU was declared failed (rather than falling silent or stalling)."""
        return self.detected_by(name) == "declared"

    def stats(self) -> dict:
        return {"period_s": self.period, "timeout_s": self.timeout, "stall_s": self.watchdog.bound,
                "beats": self._count, "send_errors": self.send_errors, "over": sorted(self._socks),
                "max_peer_silence_s": round(self.max_silence, 4), "max_own_gap_s": round(self.max_loop_gap, 4)}

    def stop(self, left: bool = True) -> None:
        """Stop beating; with left=True tell the watchers that we left rather than failed."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if left:
            self._last_words(beats.LEFT)
        for sock in self._socks.values():
            sock.close()
        self._socks = {}
        self.watch(())

    def declare_failed(self) -> None:
        """This rank's GPU is out of service: stop beating and tell the watchers so."""
        self._stop.set()
        self._last_words(beats.DECLARED)

    # -- the wire -------------------------------------------------------------------------------
    def _beat(self) -> None:
        self._count += 1
        flags = self._flags | (beats.WAITING if self.watchdog.waiting else 0)
        data = beats.encode(self._count, self.watchdog.progress, flags, self.name)
        now = time.monotonic()
        lingering = [(path, addr) for (_, path), (addr, until) in self._lingering.items() if until > now]
        for path, addr in [*self._targets, *lingering]:
            try:
                self._socks[path].sendto(data, (addr, beats.PORT))
            except (OSError, KeyError):
                self.send_errors += 1         # our own port is down (no route): the watchers will notice

    def _last_words(self, flag: int) -> None:
        """A few beats with `flag` (a datagram may be lost; silence then says the same a second later)."""
        self._flags |= flag
        for _ in range(3):
            self._beat()

    def _receive(self, now: float) -> None:
        """Take the beats waiting in the sockets, each dated by the kernel's arrival stamp: the thread reads them
        once a period instead of waking for each of them (four a period on 8 servers of 8 GPUs)."""
        offset = time.time() - now                 # the stamps are wall clock; silence is kept on the monotonic one
        for path, sock in list(self._socks.items()):
            if sock.fileno() < 0:                  # closed under us (its port gone): beat on the others
                del self._socks[path]
                continue
            while True:
                try:
                    data, anc, _, _ = sock.recvmsg(256, beats.STAMP_SPACE)
                except (BlockingIOError, OSError):
                    break
                beat = beats.decode(data)
                if beat is None:
                    continue
                at = min(now, beats.stamp(anc, now + offset) - offset)
                count, progress, flags, name = beat
                with self._lock:
                    link, peer = self._links.get((name, path)), self._peers.get(name)
                    if link is None or peer is None:
                        continue
                    if link["heard"]:
                        self.max_silence = max(self.max_silence, at - link["since"])
                    link["since"], link["heard"] = max(at, link["since"]), True
                    peer["left"] = peer["left"] or bool(flags & beats.LEFT)
                    peer["declared"] = peer["declared"] or bool(flags & beats.DECLARED)
                    self.watchdog.heard(name, progress, bool(flags & beats.WAITING), at)

    # -- the thread -----------------------------------------------------------------------------
    def _run(self) -> None:
        last = next_beat = time.monotonic()
        while not self._stop.is_set():
            self._stop.wait(max(0.0, next_beat - time.monotonic()))
            now = time.monotonic()
            if now < next_beat:
                continue
            self._receive(now)
            gap, last = now - last, now
            next_beat = now + self.period
            self.max_loop_gap = max(self.max_loop_gap, gap)
            self._beat()
            # starved: late by more than half the timeout (and than a period: a timeout of two periods or less
            # would find every loop starved, and nobody ever failed)
            starved = gap > max(self.timeout / 2, 2 * self.period)
            if self._judge(now, starved=starved) and self.on_failure is not None:
                self.on_failure()

    def _judge(self, now: float, starved: bool) -> bool:
        """Declare what the beats, the watchdog and the news say; True if a peer newly failed."""
        newly = False
        with self._lock:
            if starved:                      # we were not running: we cannot tell who was silent
                for link in self._links.values():
                    link["since"] = now
                self.watchdog.restart_clocks(now)
            for (name, path), link in self._links.items():
                peer, silence = self._peers[name], now - link["since"]
                if name in self._failed or peer["left"]:
                    continue
                if peer["declared"]:
                    newly |= self._fail(name, silence, "was declared failed", "declared")
                elif silence > (self.timeout if link["heard"] else self.join_grace):
                    newly |= self._fail(name, silence, f"missed its heartbeats over the "
                                                       f"{beats.PATH_NAMES[path]} for {silence:.2f} s", "heartbeats")
            for name, still in self.watchdog.stalled(now).items():
                if name in self._peers and name not in self._failed and not self._peers[name]["left"]:
                    newly |= self._fail(name, still, f"stalled: made no progress for {still:.2f} s while its "
                                                     f"peers waited on it (watchdog)", "watchdog")
            learned = self._read_news()
            if newly or learned:
                self._publish_news()
        return newly or learned

    def _fail(self, name: str, silence: float, why: str, by: str, at: float | None = None,
              first_hand: bool = True) -> bool:
        self._failed[name] = {"silence": silence, "at": at or time.time(), "why": why, "by": by,
                              "first_hand": first_hand}
        return True

    def _never_heard(self, name: str) -> bool:
        """This watcher has direct paths to the peer and heard it on none: its first beats, sent just before it
        died, never arrived here, so only the join grace would find it (a peer watched only through others'
        news has no paths here: their heartbeats tell of it)."""
        links = [link for (n, _), link in self._links.items() if n == name]
        return bool(links) and not any(link["heard"] for link in links)

    # -- news: first-hand verdicts shared through the store directory --------------------------
    def _beating_path(self, name: str) -> str:
        return os.path.join(self.directory, BEATING.format(name=name))

    def _admitted_at(self, name: str, peer: dict) -> float:
        """Since when news of the peer counts (wall time). Re-admitted by this watcher: since then. First
        watched: since its current life began, its mark (it beat), if that is earlier: a peer that died while this
        rank was still starting was found failed before this rank watched it, and that verdict holds (else the
        survivors wait for it at their agreement to the deadline); a verdict of a previous life (a rank started
        again marks anew) predates the mark. Without a mark, since the first watch (its restart may be under way)."""
        if not peer.get("first"):
            return peer["readmitted"]
        try:
            return min(peer["readmitted"], os.stat(self._beating_path(name)).st_mtime)
        except OSError:
            return peer["readmitted"]

    def _publish_news(self) -> None:
        # first-hand verdicts, and the launcher's word this watcher took: a watcher with no path to that rank
        # (another rail of another server) would otherwise never learn of one that died before its beats reached
        # anyone
        news = {n: {k: f[k] for k in ("silence", "at", "why", "by")}
                for n, f in self._failed.items() if (f["first_hand"] or f["by"] == "exit") and n in self._peers}
        path = os.path.join(self.directory, NEWS.format(name=self.name))
        with open(path + ".tmp", "w") as out:
            json.dump(news, out)
        os.replace(path + ".tmp", path)

    def _news_unchanged(self) -> bool:
        """Whether no news file can have been replaced since the last full read (and none is due)."""
        try:
            mtime = os.stat(self.directory).st_mtime_ns
        except OSError:
            return False
        seen, began, due = self._news_dir
        if mtime == seen and seen < began - NEWS_TICK_NS and time.monotonic() < due:
            return True
        self._news_dir = (mtime, time.time_ns(), time.monotonic() + self.timeout)
        return False

    def _read_news(self) -> bool:
        if self._news_unchanged():
            return False
        newly = False
        for reporter in [*self._peers, LAUNCHER]:
            path = os.path.join(self.directory, NEWS.format(name=reporter))
            try:
                st = os.stat(path)
                version = (st.st_ino, st.st_mtime_ns, st.st_size)   # two writes within a clock tick differ too
                if self._news_seen.get(reporter) == version:
                    continue
                with open(path) as f:
                    news = json.load(f)
                self._news_seen[reporter] = version
            except (OSError, ValueError):
                continue
            for name, f in news.items():
                peer = self._peers.get(name)
                if peer is None or name in self._failed:
                    continue             # not ours to watch, or known already
                if reporter == LAUNCHER:
                    if os.path.exists(self._beating_path(name)) and not self._never_heard(name):
                        continue         # it beat: its silence will tell (the launcher covers the time before)
                elif f["at"] < self._admitted_at(name, peer):
                    continue             # older than its re-admission (the launcher's word is of the process now)
                newly |= self._fail(name, f["silence"], f"{f['why']} (seen by {reporter})", f["by"], f["at"],
                                    first_hand=False)
        return newly


_launcher_lock = threading.Lock()


def report_exit(directory: str, name: str, at: float | None, how: str = "") -> None:
    """The launcher's news (LAUNCHER): the rank `name`'s process ended at `at` (wall time) without its result;
    at=None: a process of it was started again (what was said of its previous life no longer holds)."""
    path = os.path.join(directory, NEWS.format(name=LAUNCHER))
    with _launcher_lock:
        try:
            with open(path) as f:
                news = json.load(f)
        except (OSError, ValueError):
            news = {}
        if at is None:
            news.pop(name, None)
        else:
            news[name] = {"silence": 0.0, "at": at, "why": f"ended: {how}", "by": "exit"}
        os.makedirs(directory, exist_ok=True)
        with open(path + ".tmp", "w") as out:
            json.dump(news, out)
        os.replace(path + ".tmp", path)
