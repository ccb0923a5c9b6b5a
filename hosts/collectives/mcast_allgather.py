"""Multicast AllGather and Broadcast (Khalilov, Di Girolamo, Hoefler et al., SC'24).

Each shard is cut into MTU-sized chunks sent as UD multicast to the group (the switches replicate),
the chunk id in the immediate data. Senders form R concurrent chains along the ring: the first of a
chain starts, every other waits for a zero-byte activation from its predecessor (its left ring
neighbour), multicasts its shard, then activates its successor. R senders share every receiver's
link, so each is paced at the NIC rate / min(R, ranks - 1). Receivers keep a bitmap of chunks, no per-packet ACKs.
Chunks still missing once their sender is done (a chunk of the next shard in its chain arrived, or
its last chunk did), or after a deadline derived from size and link rate, are read from the right
ring neighbour with one RDMA READ per contiguous gap, once that neighbour reports the shard complete
(it publishes its buffer's address and rkey at set-up). A rank tells its right neighbour FIN when it
needs nothing more from it, and returns once its left neighbour's FIN came: buffers stay valid while
they are read. On a fabric where multicast reaches only the sender's rail (rail-only), the AllGather
is hierarchical: multicast within each rail, then a ring over the HB domain.

Group address: 239.x.y.z from a hash of the communicator's store, the operation and the ranks, so
every rank derives the same one. Control messages and data carry a 4-bit epoch; data of an earlier
operation is ignored (data of a later one is dropped and recovered).
"""
from __future__ import annotations

import time
import zlib

import numpy as np

from hosts.collectives import groups
from hosts.rdma import GRH_LEN, Access, AddressHandle, QPInfo, QPType, RecvWR, SendWR, WCOpcode, WROpcode

CHUNK = 1024                 # UD payload: the RoCE MTU of the NICs
MCAST_QPN, QKEY = 0xFFFFFF, 0x4D434147
RECV_SLOTS, SEND_DEPTH = 512, 64
CHAINS = 2
ACTIVATE, COMPLETE, FIN = 1, 2, 3
K_CTRL_RECV, K_CTRL_SEND, K_DATA, K_READ = 1, 2, 3, 4     # wr_id >> 61


def group_address(*parts) -> str:
    """A deterministic multicast address in 239.0.0.0/8 (never 239.0.0.x)."""
    h = zlib.crc32("|".join(map(str, parts)).encode()) % ((1 << 24) - 256) + 256
    return f"239.{h >> 16 & 255}.{h >> 8 & 255}.{h & 255}"


def data_imm(epoch: int, shard: int, chunk: int) -> int:
    return (epoch & 15) << 28 | shard << 18 | chunk          # 1024 shards of 256 Ki chunks


def ctrl_imm(kind: int, epoch: int, value: int = 0) -> int:
    return kind << 30 | (epoch & 15) << 26 | value


def gaps(have: np.ndarray) -> list[tuple[int, int]]:
    """Contiguous runs [lo, hi) of missing chunks in a bitmap."""
    edges = np.flatnonzero(np.diff(np.concatenate(([1], have.astype(np.int8), [1]))))
    return [(int(edges[i]), int(edges[i + 1])) for i in range(0, len(edges), 2)]


def deadline_s(receive_bytes: int, rate_bps: float | None) -> float:
    """When to stop waiting for multicast: 1.5x the time to receive everything at the link rate."""
    return 1.5 * receive_bytes * 8 / (rate_bps or 1e9) + 0.2


def chains_of(n: int, r: int) -> list[list[int]]:
    """r contiguous runs of ring positions (each sender's successor is its right neighbour)."""
    return [list(c) for c in np.array_split(np.arange(n), min(r, n)) if len(c)]


class Multicast:
    """A UD QP in one multicast group with RC links to both ring neighbours, kept per communicator."""

    def __init__(self, comm, group: list[int], op: str, chains: int = CHAINS):
        self.comm, self.group, self.chains = comm, group, chains
        self.pos = group.index(comm.rank)
        self.left, self.right = group[self.pos - 1], group[(self.pos + 1) % len(group)]
        dev, pd, _ = comm.device("nic")
        self.pd, self.rate = pd, comm.rate_limit_bps.get("nic")
        self.cq = dev.create_cq(16384)
        self.address = group_address(getattr(comm.store, "path", ""), op, *group)
        self.ud = dev.create_qp(pd, QPType.UD, self.cq, max_send_wr=SEND_DEPTH * 2, max_recv_wr=RECV_SLOTS,
                                rate_limit_bps=self.rate and self.rate / chains, qkey=QKEY)
        self.ah = AddressHandle(self.address, MCAST_QPN, QKEY)
        self.slot = GRH_LEN + CHUNK
        self.rbuf = np.zeros(RECV_SLOTS * self.slot, dtype=np.uint8)
        self.rmr = pd.reg_mr(self.rbuf, Access.LOCAL_WRITE)
        self.ctl = np.zeros(4 * 64, dtype=np.uint8)
        self.cmr = pd.reg_mr(self.ctl, Access.LOCAL_WRITE)
        self.ud.attach_mcast(self.address)                        # the kernel sends the IGMP report
        for i in range(RECV_SLOTS):
            self.ud.post_recv(RecvWR([self.rmr.sge(i * self.slot, self.slot)], wr_id=i))
        self.key = f"mcast/{self.address}"
        self.to_right = self._link("right")      # our reads, activations and FIN go right
        self.to_left = self._link("left")        # COMPLETE goes left; the left neighbour reads from us
        for qp, peer, theirs in ((self.to_right, self.right, "left"), (self.to_left, self.left, "right")):
            qp.connect(QPInfo.from_dict(comm.store.get(f"{self.key}/{peer}/{theirs}", what=f"rank {peer} to connect")))
        store = comm.store
        store.set(f"{self.key}/joined/{comm.rank}", 1)
        for r in group:
            store.get(f"{self.key}/joined/{r}", what=f"rank {r} to join {self.address}")
        time.sleep(0.3)                                            # the controller installs the tree
        self.epoch, self.buf, self.mr, self.peer_mr, self.gen = 0, None, None, None, 0
        self.stash: list[tuple[int, int]] = []                     # control messages of a later epoch
        self.stats = {"recovered_chunks": 0, "reads": 0, "multicast_chunks": 0, "dropped_chunks": 0}

    def _link(self, side: str):
        dev, _, _ = self.comm.device("nic")
        qp = dev.create_qp(self.pd, QPType.RC, self.cq, rate_limit_bps=self.rate, timeout=0.2, retry_cnt=7)
        for i in range(64):
            qp.post_recv(RecvWR([self.cmr.sge(0, 4)], wr_id=K_CTRL_RECV << 61))
        self.comm.store.set(f"{self.key}/{self.comm.rank}/{side}", qp.info().to_dict())
        return qp

    def buffer(self, nbytes: int) -> np.ndarray:
        """The registered working buffer (the neighbour reads it); re-registered when it grows."""
        if self.buf is None or len(self.buf) < nbytes:
            self.buf = np.zeros(nbytes, dtype=np.uint8)
            self.mr = self.pd.reg_mr(self.buf, Access.LOCAL_WRITE | Access.REMOTE_READ)
            self.gen += 1
            store = self.comm.store
            store.set(f"{self.key}/mr{self.gen}/{self.comm.rank}", [self.mr.addr, self.mr.rkey])
            self.peer_mr = store.get(f"{self.key}/mr{self.gen}/{self.right}", what=f"rank {self.right}'s buffer")
        return self.buf

    def ctrl(self, qp, kind: int, value: int = 0) -> None:
        qp.post_send(SendWR(WROpcode.SEND_WITH_IMM, [], wr_id=K_CTRL_SEND << 61, imm=ctrl_imm(kind, self.epoch, value)))

    # -- one operation -------------------------------------------------------------------------
    def run(self, shards: list[tuple[int, int, int]]) -> None:
        """shards[i] = (owner position in the group, lo, hi) bytes of the buffer; afterwards every
        rank's buffer holds every shard. Shard i's sender follows shard i-1's in its chain."""
        self.epoch = (self.epoch + 1) & 15
        comm, buf = self.comm, self.buf
        n = len(shards)
        counts = [max(1, -(-(hi - lo) // CHUNK)) for _, lo, hi in shards]
        have = [np.full(c, owner == self.pos) for (owner, _, _), c in zip(shards, counts)]
        missing = sum(int((~h).sum()) for h in have)
        done_sending = [owner == self.pos for owner, _, _ in shards]    # the sender of the shard is done
        right_has: set[int] = set()          # shards the right neighbour said it has (COMPLETE)
        requested = [np.zeros(c, bool) for c in counts]
        chain_next = {}
        chains = chains_of(n, self.chains)
        if self.rate:          # a receiver hears at most one sender per chain, never itself
            self.ud.set_rate_limit(self.rate / max(1, min(len(chains), len(self.group) - 1)))
        for chain in chains:
            for a, b in zip(chain, chain[1:]):
                chain_next[a] = b
        chain_prev = {b: a for a, b in chain_next.items()}
        mine = [i for i, (owner, _, _) in enumerate(shards) if owner == self.pos]
        to_send = [] if not mine or mine[0] in chain_prev else [(i, c) for i in mine for c in range(counts[i])]
        active = bool(to_send)
        sends_out = reads_out = 0
        fin_from_left, fin_sent = False, False
        started = time.monotonic()
        late = started + deadline_s(sum(hi - lo for _, lo, hi in shards), self.rate)
        last_progress = started
        for i in mine:
            self.ctrl(self.to_left, COMPLETE, i)
        pending_ctrl, self.stash = self.stash, []

        def on_ctrl(imm: int, from_left: bool) -> None:
            nonlocal to_send, active, fin_from_left
            kind, epoch, value = imm >> 30, imm >> 26 & 15, imm & ((1 << 26) - 1)
            if epoch != self.epoch:
                if 0 < (epoch - self.epoch) & 15 < 8:          # a neighbour already in the next operation
                    self.stash.append((imm, from_left))
            elif kind == ACTIVATE:
                to_send = [(i, c) for i in mine for c in range(counts[i])]
                active = True
            elif kind == COMPLETE:
                right_has.add(value)
            elif kind == FIN:
                fin_from_left = True

        for imm, from_left in pending_ctrl:
            on_ctrl(imm, from_left)
        while True:
            while to_send and sends_out < SEND_DEPTH:
                i, c = to_send.pop(0)
                _, lo, hi = shards[i]
                off = lo + c * CHUNK
                self.ud.post_send(SendWR(WROpcode.SEND_WITH_IMM, [self.mr.sge(off, min(CHUNK, hi - off))],
                                         wr_id=K_DATA << 61, imm=data_imm(self.epoch, i, c), ah=self.ah))
                sends_out += 1
            if active and not to_send and not sends_out:
                active = False
                if mine[-1] in chain_next:
                    self.ctrl(self.to_right, ACTIVATE)
            now = time.monotonic()
            for i in range(n):                  # recovery: one READ per gap, from the right neighbour
                if (done_sending[i] or now > late) and i in right_has and not have[i].all():
                    for lo, hi in gaps(have[i] | requested[i]):
                        _, slo, shi = shards[i]
                        off = slo + lo * CHUNK
                        length = min(shi, slo + hi * CHUNK) - off
                        self.to_right.post_send(SendWR(WROpcode.RDMA_READ, [self.mr.sge(off, length)],
                                                       wr_id=K_READ << 61 | i << 40 | lo << 20 | hi, remote_addr=self.peer_mr[0] + off,
                                                       rkey=self.peer_mr[1]))
                        requested[i][lo:hi] = True
                        reads_out += 1
                        self.stats["reads"] += 1
            if not missing and not fin_sent:
                self.ctrl(self.to_right, FIN)
                fin_sent = True
            if fin_sent and fin_from_left and not sends_out and not reads_out and not active:
                return
            wcs = self.cq.poll(256) or self.cq.wait(1, timeout=0.05)
            if wcs:
                last_progress = time.monotonic()
            else:
                comm.check_peers()                   # a member whose heartbeats stopped
            if not wcs and time.monotonic() - last_progress > comm.timeout:
                raise comm.fail(f"multicast {self.address}: no progress for {comm.timeout:.0f} s "
                                f"({missing} chunks missing, FIN from left: {fin_from_left})")
            for wc in wcs:
                if not wc.ok:
                    raise comm.fail(f"multicast {self.address}: {wc.opcode.name} failed: {wc.status.name}")
                kind = wc.wr_id >> 61
                if wc.qp_num == self.ud.qpn and wc.opcode == WCOpcode.RECV:
                    self.ud.post_recv(RecvWR([self.rmr.sge(wc.wr_id * self.slot, self.slot)], wr_id=wc.wr_id))
                    imm = wc.imm or 0
                    i, c = imm >> 18 & 1023, imm & ((1 << 18) - 1)
                    if imm >> 28 != self.epoch or i >= n or c >= counts[i]:
                        self.stats["dropped_chunks"] += 1
                        continue
                    if c == counts[i] - 1:
                        done_sending[i] = True
                    if i in chain_prev:
                        done_sending[chain_prev[i]] = True
                    if have[i][c]:
                        continue                                   # a duplicate: never copied twice
                    _, lo, hi = shards[i]
                    off = lo + c * CHUNK
                    length = wc.byte_len - GRH_LEN
                    buf[off: off + length] = self.rbuf[wc.wr_id * self.slot + GRH_LEN: wc.wr_id * self.slot + GRH_LEN + length]
                    have[i][c] = True
                    missing -= 1
                    self.stats["multicast_chunks"] += 1
                    if have[i].all():
                        self.ctrl(self.to_left, COMPLETE, i)
                elif wc.opcode in (WCOpcode.RECV, WCOpcode.RECV_RDMA_WITH_IMM):
                    qp = self.to_left if wc.qp_num == self.to_left.qpn else self.to_right
                    qp.post_recv(RecvWR([self.cmr.sge(0, 4)], wr_id=wc.wr_id))
                    on_ctrl(wc.imm or 0, qp is self.to_left)
                elif kind == K_DATA:
                    sends_out -= 1
                elif kind == K_READ:
                    reads_out -= 1
                    i, lo, hi = wc.wr_id >> 40 & 1023, wc.wr_id >> 20 & 0xFFFFF, wc.wr_id & 0xFFFFF
                    got = int((~have[i][lo:hi]).sum())
                    have[i][lo:hi] = True
                    missing -= got
                    self.stats["recovered_chunks"] += got
                    if have[i].all():
                        self.ctrl(self.to_left, COMPLETE, i)


def context(comm, group: list[int], op: str) -> Multicast:
    """The communicator's multicast set-up for this group of ranks and operation (made once)."""
    cache = comm.__dict__.setdefault("multicast", {})
    key = (op, tuple(group))
    if key not in cache:
        cache[key] = Multicast(comm, group, op)
    return cache[key]


def stats(comm) -> dict:
    total: dict[str, int] = {}
    for m in comm.__dict__.get("multicast", {}).values():
        for k, v in m.stats.items():
            total[k] = total.get(k, 0) + v
    return total


def gather_group(comm, group: list[int], shard: np.ndarray) -> np.ndarray:
    """AllGather over `group` (ring order): block i of the result is the shard of group[i]."""
    m = shard.nbytes
    ctx = context(comm, group, "allgather")
    buf = ctx.buffer(len(group) * m)
    pos = group.index(comm.rank)
    buf[pos * m:(pos + 1) * m] = shard.view(np.uint8)
    ctx.run([(i, i * m, (i + 1) * m) for i in range(len(group))])
    return buf[:len(group) * m].view(shard.dtype).copy()


def allgather(comm, shard: np.ndarray, scope: str = "fabric") -> np.ndarray:
    """scope "fabric": one group over comm.ring; "rail": multicast per rail, then the HB ring."""
    shard = np.ascontiguousarray(shard)
    n, m = comm.world, len(shard)
    out = np.empty(n * m, dtype=shard.dtype)
    if n == 1:
        out[:] = shard
        return out
    if scope != "rail":
        ring = comm.ring
        blocks = gather_group(comm, ring, shard).reshape(n, m)
        for i, rank in enumerate(ring):
            out[rank * m:(rank + 1) * m] = blocks[i]
        return out
    servers, per = groups.check_grid(comm)
    rail = groups.rail_group(comm)
    mid = gather_group(comm, rail, shard) if len(rail) > 1 else shard.copy()
    return groups.gather_hb_stage(comm, mid, out, servers, per, m)


def broadcast(comm, x: np.ndarray, root: int = 0) -> np.ndarray:
    """The root multicasts x to comm.ring; the others repair losses from their right neighbour."""
    if comm.world == 1:
        return x
    ctx = context(comm, comm.ring, "broadcast")
    buf = ctx.buffer(x.nbytes)
    if comm.rank == root:
        buf[:x.nbytes] = np.ascontiguousarray(x).view(np.uint8).reshape(-1)
    ctx.run([(comm.ring.index(root), 0, x.nbytes)])
    x[...] = buf[:x.nbytes].view(x.dtype).reshape(x.shape)
    return x
