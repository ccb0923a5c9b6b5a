"""The communicator: RC queue pairs to the peers an algorithm talks to, and a progress engine.

Every transfer is a SEND of at most `chunk` bytes into receive slots the peer pre-posted, so
transfers are chunked and pipelined, and many peers progress at once (`exchange`). RC delivers in
order per queue pair, so a receiver appends arriving chunks to what it expects from that peer;
chunks that belong to the peer's next step wait in a backlog: copied out of their slot, which is re-posted at
once, up to BACKLOG chunks per peer; beyond that their slot stays taken, which is the flow control (a sender far
ahead gets RNR NAKs and retries).

Queue pairs are created lazily, the first time a peer is used, and connected through the store.
Peers in the same server talk over the HB domain (their HB addresses), others over the NICs.

With a Heartbeat (heartbeat.py), a peer that falls silent or stalls wakes the progress engine at once and the
collective fails naming it and how it was found, instead of after the no-progress timeout.
"""
from __future__ import annotations

import queue
import threading
import time
from collections import deque

import numpy as np

from hosts.collectives.store import StoreTimeout
from hosts.rdma import Access, QPInfo, QPType, RecvWR, SendWR, WROpcode
from hosts.spec.peers import Peer      # a rank's place in the job, as the testbed's spec tells it

CHUNK = 64 * 1024
SLOTS = 16
WINDOW = 256          # packets in flight per queue pair
# chunks from a peer, ahead of the step that consumes them, copied aside so their slots take the next ones: a ring
# rank fed over fast HB links runs a step ahead of a neighbour gated by its NIC, and a slot held until then refused
# the next chunks (an RNR NAK, a retry every 0.64 ms, every packet behind it resent: half a ring's packets)
BACKLOG = 4 * SLOTS


class CollectiveError(RuntimeError):
    """A collective failed; the message names the rank, the operation and the peer."""


def rail_order(places: list[tuple]) -> list[int] | None:
    """The rail-ring order of GPUs at `places` ((server, rail) each), as indices into `places`: down rail 0
    across the servers, over the HB domain to rail 1, back up, and so on, as rail-aware NCCL rings go. With an
    odd number of rails the closing hop crosses rails (it has no path on a rail-only fabric). None when a
    place is unknown or two GPUs share one."""
    if any(server is None or rail is None for server, rail in places):
        return None
    servers = sorted({server for server, _ in places})
    rails = sorted({rail for _, rail in places})
    at = {place: i for i, place in enumerate(places)}
    order = []
    for k, j in enumerate(rails):
        for i in (servers if k % 2 == 0 else reversed(servers)):
            if (i, j) in at:
                order.append(at[(i, j)])
    return order if len(order) == len(places) else None


def rail_ring(peers: list[Peer]) -> list[int]:
    """A cycle through all ranks whose NIC hops stay inside a rail (rail_order); rank order where the
    peers' places are not all known."""
    order = rail_order([(p.server, p.local_rank) for p in peers])
    return [peers[i].rank for i in order] if order is not None else [p.rank for p in peers]


class Message:
    """One message of Communicator.stream: a view of its array (what is sent is the array's content when it is
    sent), sent chunk by chunk once it is first in its peer's queue and `ready`."""
    __slots__ = ("data", "off", "ready")

    def __init__(self, arr, ready: bool = True):
        self.data = memoryview(arr).cast("B")
        self.off, self.ready = 0, ready


class Channel:
    """The queue pairs to one peer ("lanes": 1, or K with split:K striping), with send and receive
    slots. Chunk i travels on lane i % K, so the receiver restores the order lane by lane."""

    def __init__(self, comm: "Communicator", peer: Peer):
        self.peer = peer
        self.path = path = "hb" if comm.same_server(peer) else "nic"
        dev, pd, cq = comm.device(path)
        # kernel rxe has no per-QP pacing: there the hosts' shaped interfaces (tbf) pace the QPs
        self.rate = comm.rate_limit_bps.get(path) if getattr(dev, "backend", None) != "rxe" else None
        self.lanes = comm.split
        # A fixed retransmission timer must outlast draining a full window through the shaped link; an adaptive
        # one (the default) follows the round trip it measures and uses that as its ceiling. The kernel's rxe
        # has a fixed timer only.
        timeout = comm.rc_timeout if not self.rate else \
            max(comm.rc_timeout, 0.05 + 2 * WINDOW * (dev.mtu + 80) * 8 / self.rate)
        rxe = getattr(dev, "backend", None) == "rxe"
        if rxe and comm.congestion == "dcqcn":
            raise comm.fail("congestion dcqcn needs the uroce transport: kernel rxe has no DCQCN")
        options = dict(rto=comm.rto, time_scale=comm.time_scale) if not rxe else {}
        if comm.congestion and self.rate:
            options.update(cc=comm.congestion)
        self.qps = [dev.create_qp(pd, QPType.RC, cq, rate_limit_bps=self.rate and self.rate / self.lanes,
                                  timeout=timeout, retry_cnt=7, max_outstanding=WINDOW,
                                  sport_mode=comm.sport_mode, **options)
                    for _ in range(self.lanes)]
        n = SLOTS * self.lanes
        self.chunk = comm.chunk
        self.send_buf = np.zeros(n * comm.chunk, dtype=np.uint8)
        self.recv_buf = np.zeros(n * comm.chunk, dtype=np.uint8)
        self.send_mr = pd.reg_mr(self.send_buf, Access.LOCAL_WRITE)
        self.recv_mr = pd.reg_mr(self.recv_buf, Access.LOCAL_WRITE)
        self.free_send = [deque(range(k * SLOTS, (k + 1) * SLOTS)) for k in range(self.lanes)]
        self.arrivals = [deque() for _ in range(self.lanes)]      # [slot, length, copy] not yet consumed
        self.next_send = self.next_recv = 0
        self.copied = 0                 # chunks held over in copies (hold_over)
        self.shares = 1
        for qp in self.qps:
            comm.by_qpn[(path, qp.info().qpn)] = self
        for slot in range(n):
            self.post_recv(slot)
        me = comm.me.rank
        comm.store.set(f"qp/{me}->{peer.rank}", [qp.info().to_dict() for qp in self.qps])
        try:
            remote = comm.store.get(f"qp/{peer.rank}->{me}", what=f"rank {peer.rank} ({peer.name}) to connect")
            for qp, info in zip(self.qps, remote):
                qp.connect(QPInfo.from_dict(info))
            # both ends ready before either sends: a packet for an unconnected QP would be dropped
            comm.store.set(f"ready/{me}->{peer.rank}", 1)
            comm.store.get(f"ready/{peer.rank}->{me}", what=f"rank {peer.rank} ({peer.name}) to connect")
        except StoreTimeout as exc:
            raise comm.fail(str(exc)) from None

    # wr_id = slot << 1, with the low bit set for receives; slot // SLOTS is the lane
    def post_recv(self, slot: int) -> None:
        self.qps[slot // SLOTS].post_recv(RecvWR([self.recv_mr.sge(slot * self.chunk, self.chunk)],
                                                 wr_id=slot << 1 | 1))

    def can_send(self) -> bool:
        return bool(self.free_send[self.next_send % self.lanes])

    def post_send(self, data: memoryview) -> None:
        lane = self.next_send % self.lanes
        slot = self.free_send[lane].popleft()
        self.send_buf[slot * self.chunk: slot * self.chunk + len(data)] = np.frombuffer(data, dtype=np.uint8)
        self.qps[lane].post_send(SendWR(WROpcode.SEND, [self.send_mr.sge(slot * self.chunk, len(data))],
                                        wr_id=slot << 1))
        self.next_send += 1

    def sent(self, slot: int) -> None:
        self.free_send[slot // SLOTS].append(slot)

    def arrived(self, slot: int, length: int) -> None:
        self.arrivals[slot // SLOTS].append([slot, length, None])

    def hold_over(self) -> None:
        """Copy chunks still waiting for their step out of their receive slots, up to BACKLOG, and re-post the
        slots."""
        for lane in self.arrivals:
            for chunk in lane:
                if self.copied >= BACKLOG:
                    return
                if chunk[2] is None:
                    chunk[2] = bytes(self.take(chunk))
                    self.copied += 1
                    self.post_recv(chunk[0])

    def next_message(self):
        """The next chunk in sending order, if it has arrived: [slot, length, copy or None]."""
        lane = self.arrivals[self.next_recv % self.lanes]
        if not lane:
            return None
        self.next_recv += 1
        return lane.popleft()

    def take(self, chunk) -> memoryview:
        """A chunk's bytes; its slot is re-posted once they are consumed (a copy's slot already was)."""
        slot, length, copy = chunk
        if copy is not None:
            self.copied -= 1
            return memoryview(copy)
        return memoryview(self.recv_buf)[slot * self.chunk: slot * self.chunk + length]

    def set_rate(self, shares: int) -> None:
        if self.rate and self.shares != shares:
            self.shares = shares
            for qp in self.qps:
                qp.set_rate_limit(self.rate / shares / self.lanes)


class Communicator:
    """A group of ranks that run collectives together; see algorithms.py for the operations."""

    def __init__(self, me: Peer, peers: list[Peer], store, open_device, *, chunk: int = CHUNK,
                 timeout: float = 30.0, rc_timeout: float = 0.05, rate_limit_bps: dict | None = None,
                 ring: list[int] | None = None, sport_mode: str = "qp", split: int = 1, heartbeat=None):
        self.me, self.peers, self.store = me, peers, store
        self.ring = ring or rail_ring(peers)
        self.rank, self.world = me.rank, len(peers)
        self.chunk, self.timeout, self.rc_timeout = chunk, timeout, rc_timeout
        self.rate_limit_bps = rate_limit_bps or {}
        self.sport_mode = sport_mode      # "packet": a new UDP source port per packet (spraying)
        self.split = split                # queue pairs per peer, each message striped over them
        self.congestion = None            # "delay" or "dcqcn": paced queue pairs back off when queues build
        self.time_scale = 1.0             # the fabric's: DCQCN's timers and rates (and the CNP interval) scale by it
        self.rto = "adaptive"             # "fixed": retransmit after rc_timeout (sized for full queues), as rxe
        # multicast AllGather (mcast_allgather.py): where the fabric replicates ("rail": inside a rail only),
        # whether the testbed reports installed trees, how long to stay in the groups after the job
        self.multicast_scope, self.trees_confirmed, self.group_hold_s = "fabric", False, 0.0
        self._open_device = open_device
        self._devices: dict[str, tuple] = {}
        self._forwarders: list[threading.Thread] = []
        self.channels: dict[int, Channel] = {}
        self.by_qpn: dict[tuple[str, int], Channel] = {}
        self.retired: set[tuple[str, int]] = set()
        self.completions: queue.Queue = queue.Queue()
        self.op = "setup"
        self._closing = False
        self.heartbeat = heartbeat
        if heartbeat is not None:
            heartbeat.watch([p.name for p in peers])          # its place in the rings too
            heartbeat.on_failure = lambda: self.completions.put(("heartbeat", None))

    # -- plumbing -----------------------------------------------------------------------------
    def same_server(self, peer: Peer) -> bool:
        return peer.server is not None and peer.server == self.me.server and bool(self.me.hb_ip)

    def device(self, path: str):
        """(device, PD, CQ) for the NIC or the HB port, opened on first use."""
        if path not in self._devices:
            dev = self._open_device(self.me.hb_ip if path == "hb" else self.me.ip)
            pd, cq = dev.alloc_pd(), dev.create_cq()
            if getattr(cq, "deliver_to", None):     # uroce: straight into the queue the progress engine waits on
                cq.deliver_to(lambda wc, path=path: self.completions.put((path, wc)))
            else:                               # kernel rxe: a thread polls the CQ
                forwarder = threading.Thread(target=self._forward, args=(path, cq), daemon=True,
                                             name=f"tb-cq-{path}")
                forwarder.start()
                self._forwarders.append(forwarder)
            self._devices[path] = (dev, pd, cq)
        return self._devices[path]

    def _forward(self, path: str, cq) -> None:
        """Funnel a kernel device's completions into the one queue the progress engine blocks on."""
        while not self._closing:
            for wc in cq.wait(1, timeout=0.5):
                self.completions.put((path, wc))

    def channel(self, rank: int) -> Channel:
        if rank not in self.channels:
            self.channels[rank] = Channel(self, self.peers[rank])
        return self.channels[rank]

    def replace_channel(self, rank: int) -> None:
        """Forget the channel to `rank` (its queue pairs may have failed): the next channel(rank) opens new ones,
        with the peer doing the same; the old ones are destroyed and their late completions ignored."""
        old = self.channels.pop(rank, None)
        if old is None:
            return
        for key in [k for k, ch in self.by_qpn.items() if ch is old]:
            del self.by_qpn[key]
            self.retired.add(key)
        for qp in old.qps:
            qp.destroy()

    def close(self, linger: float | None = None) -> None:
        """Close the devices; linger=0 skips waiting for peers' last retransmissions (after a failure)."""
        self._closing = True
        if self.heartbeat is not None:
            self.heartbeat.on_failure = None
        # A forwarder may be inside a poll of its CQ: closing a kernel device under it frees the CQ it reads
        # (a crash with rxe), so wait for them to see _closing first; their CQs stop waiting for that.
        for _, _, cq in self._devices.values():
            cq.stop_waiting()
        for forwarder in self._forwarders:
            if forwarder is not threading.current_thread():
                forwarder.join(timeout=2.0)
        self._forwarders = []
        for dev, _, _ in self._devices.values():
            dev.close(linger=linger)
        self._devices = {}

    def counters(self) -> dict:
        """Transport counters: the devices', plus what only queue pairs count (e.g. out_of_order)."""
        total: dict[str, int] = {}
        for dev, _, _ in self._devices.values():
            for k, v in dev.counters.items():
                total[k] = total.get(k, 0) + v
        device_keys = set(total)
        for ch in self.channels.values():
            for qp in ch.qps:
                for k, v in qp.counters.items():
                    if k not in device_keys:
                        total[k] = total.get(k, 0) + v
        return total

    def fail(self, what: str) -> CollectiveError:
        return CollectiveError(f"rank {self.rank} ({self.me.name}): {self.op}: {what}")

    def peer_failure(self) -> str | None:
        """A peer the heartbeats declared failed, named with its rank, or None."""
        failed = self.heartbeat.failed() if self.heartbeat is not None else {}
        if not failed:
            return None
        name = min(failed, key=lambda n: failed[n][1])
        rank = next((p.rank for p in self.peers if p.name == name), "?")
        return f"rank {rank} ({name}) {self.heartbeat.why(name)}"

    def explained(self, what: str) -> str:
        """A failed transfer is most often a peer's failure seen from the side (a survivor that gave up on a dead
        rank closed its queue pairs): give the heartbeats up to their timeout to name the rank that failed first."""
        if self.heartbeat is None:
            return what
        deadline = time.monotonic() + self.heartbeat.timeout + 2 * self.heartbeat.period
        while (cause := self.peer_failure()) is None and time.monotonic() < deadline:
            time.sleep(self.heartbeat.period / 2)
        return what if cause is None else f"{cause} ({what})"

    def check_peers(self) -> None:
        """Raise if a peer was declared failed (called where the engine waits)."""
        if (what := self.peer_failure()) is not None:
            raise self.fail(what)

    def _share_links(self, senders) -> None:
        """Pace each queue pair at its link's rate divided by the peers it SENDS to over that link in
        this step, as a NIC shares its line rate among its queue pairs: without this, an all-to-all
        sends several times the NIC's rate into the NIC's own queue. Peers this rank only receives from
        take none of its line rate (a ring step sends to one neighbour and receives from the other:
        counting both halved every ring over the HB domain). Queues further on (oversubscribed
        uplinks, incast) are congestion control's business (`congestion: delay`)."""
        per_path: dict[str, int] = {}
        for ch in senders:
            per_path[ch.path] = per_path.get(ch.path, 0) + 1
        for ch in senders:
            ch.set_rate(per_path[ch.path])

    # -- the progress engine ------------------------------------------------------------------
    def exchange(self, sends=(), recvs=()) -> None:
        """Send each (peer, array) and fill each (peer, array) concurrently; returns when all are done.

        Arrays must be C-contiguous; receives must be writable. Several entries for one peer are
        served in the order given, which must match the order the peer sends them in.
        """
        self.stream([(rank, Message(np.ascontiguousarray(arr))) for rank, arr in sends],
                    [(rank, arr, None) for rank, arr in recvs])

    # Long on purpose: the per-chunk progress loop of every collective; absorb/drain close over its queues.
    def stream(self, sends, recvs) -> None:
        """exchange() for data computed while it runs (the pipelined collectives, pipeline.py): sends are
        (peer, Message), each sent once it is first in its peer's queue and ready; recvs are (peer, array, then),
        then() called once the array is filled (at once if it is empty), where it may mark messages ready.
        Per peer, sends and recvs go in the order given, which must match the peer's."""
        out: dict[int, deque] = {}
        for rank, msg in sends:
            out.setdefault(rank, deque()).append(msg)
        inbound: dict[int, deque] = {}
        for rank, arr, then in recvs:
            view = memoryview(arr).cast("B")
            if len(view):
                inbound.setdefault(rank, deque()).append([view, 0, then])
            elif then is not None:
                then()
        self.check_peers()
        channels = {r: self.channel(r) for r in sorted(set(out) | set(inbound))}
        self._share_links([channels[r] for r, q in out.items() if any(len(m.data) for m in q)])
        in_flight = 0

        def absorb(ch: Channel, chunk: list) -> None:
            """Copy a received chunk into the places expected from its peer."""
            pending = inbound[ch.peer.rank]
            data, pos, length = ch.take(chunk), 0, chunk[1]
            while pos < length:
                if not pending:
                    raise self.fail(f"rank {ch.peer.rank} ({ch.peer.name}) sent more than expected")
                target = pending[0]
                view, off, then = target
                n = min(len(view) - off, length - pos)
                view[off: off + n] = data[pos: pos + n]
                target[1] += n
                pos += n
                if target[1] == len(view):
                    pending.popleft()
                    if then is not None:
                        then()
            if not pending:
                del inbound[ch.peer.rank]
            if chunk[2] is None:
                ch.post_recv(chunk[0])

        def drain(ch: Channel) -> None:
            """Consume, in sending order, what has arrived and is expected; the rest waits."""
            while ch.peer.rank in inbound and (msg := ch.next_message()):
                absorb(ch, msg)
            ch.hold_over()

        for ch in self.channels.values():             # chunks that arrived before this step began
            drain(ch)

        while True:
            for rank, q in out.items():
                ch = channels[rank]
                while q and q[0].ready and (q[0].off >= len(q[0].data) or ch.can_send()):
                    msg = q[0]
                    if msg.off < len(msg.data):
                        ch.post_send(msg.data[msg.off: msg.off + self.chunk])
                        msg.off += self.chunk
                        in_flight += 1
                    if msg.off >= len(msg.data):
                        q.popleft()
            if not in_flight and not inbound and not any(out.values()):
                return
            try:
                path, wc = self.completions.get(timeout=self.timeout)
            except queue.Empty:
                waiting = sorted(inbound) or sorted(r for r, q in out.items() if q)
                names = ", ".join(f"rank {r} ({self.peers[r].name})" for r in waiting) or "send completions"
                raise self.fail(f"no progress for {self.timeout:.0f} s waiting for {names}") from None
            if path == "heartbeat":
                self.check_peers()
                continue
            ch = self.by_qpn.get((path, wc.qp_num))
            if ch is None and (path, wc.qp_num) in self.retired:
                continue                  # a replaced channel's queue pair flushing its last work requests
            if ch is None:
                raise self.fail(f"completion for unknown queue pair {wc.qp_num} on the {path} device")
            if not wc.ok:
                raise self.fail(self.explained(f"transfer with rank {ch.peer.rank} ({ch.peer.name}) failed: "
                                               f"{wc.status.name}"))
            slot, is_recv = wc.wr_id >> 1, wc.wr_id & 1
            if not is_recv:
                ch.sent(slot)
                in_flight -= 1
            else:
                ch.arrived(slot, wc.byte_len)
                drain(ch)
