"""One end of a multi-connection transfer across sites, as PCCL fills a long fat pipe: `size` bytes written with
RDMA WRITEs striped over N RC queue pairs, each allowed `window` packets in flight, for each N in turn. Started
by the testbed's `wan_transfer` workload, one sender and one receiver.

    python -m hosts.agents.wan_transfer SPEC.json

SPEC: a WanTransferSpec (hosts/spec/wan.py). A queue pair's window is enforced by its own sender
(max_outstanding), so one queue pair moves at most window x MTU per round trip; it asks for an acknowledgement
every quarter window, so that the window slides rather than stopping once per round trip.

The sender measures the round trip (the median of 1-byte WRITEs on an idle queue pair) and the transfer (first
WRITE posted to the last one acknowledged: every byte placed at the receiver); the receiver compares its buffer
with the payload both ends draw from the seed. Each prints one JSON line: {"role", "runs": [...]} or {"error"}.
"""
from __future__ import annotations

import json
import statistics
import sys
import time

import numpy as np

from hosts.collectives.store import FileStore, StoreTimeout
from hosts.rdma import Access, QPInfo, QPType, SendWR, WROpcode, open_device
from hosts.spec.wan import WanTransferSpec


LONGEST_S = 3600       # the receiver's wait for a transfer: the sender's failure ends it sooner


class TransferError(RuntimeError):
    pass


def payload(size: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)


def chunks(size: int, chunk: int, n: int) -> list[tuple[int, int, int]]:
    """(queue pair, offset, length) of each WRITE: chunk k on queue pair k % n."""
    return [(k % n, off, min(chunk, size - off)) for k, off in enumerate(range(0, size, chunk))]


class End:
    def __init__(self, spec: WanTransferSpec, open=open_device):
        self.spec = spec
        # a wait on the other end gives up at once when it has failed (its error is in the store)
        self.store = FileStore(spec.store, timeout=spec.timeout_s, interrupt=self.other_failed)
        self.dev = open(spec.ip, backend="uroce", mtu=spec.mtu)
        self.pd, self.cq = self.dev.alloc_pd(), self.dev.create_cq()
        self.data = payload(spec.size, spec.seed)

    def other_failed(self) -> str | None:
        other = "recv" if self.spec.role == "send" else "send"
        return f"the {other} end failed" if self.store.exists(f"failed/{other}") else None

    def qps(self, n: int) -> list:
        s = self.spec
        rate = s.rate_limit_bps and s.rate_limit_bps / n      # the NIC's rate, shared
        return [self.dev.create_qp(self.pd, QPType.RC, self.cq, rate_limit_bps=rate, max_outstanding=s.window,
                                   ack_every=max(1, s.window // 4), timeout=s.rc_timeout,
                                   rto_min=min(s.rto_min, s.rc_timeout), rto_max=s.rc_timeout,
                                   max_send_wr=len(chunks(s.size, s.chunk, n)) + s.pings + 1)
                for _ in range(n)]

    def wait(self, n: int, what: str) -> None:
        """n completions, each within timeout_s of the one before (a long transfer is slow, not stuck)."""
        got = 0
        while got < n:
            wcs = self.cq.wait(n - got, self.spec.timeout_s)
            bad = [w for w in wcs if not w.ok]
            got += len(wcs)
            if not wcs or bad:
                raise TransferError(f"{what}: {got}/{n} completions" + (f", {bad[0].status.name}" if bad else
                                                                        f", none for {self.spec.timeout_s:g} s"))

    def send(self, n: int) -> dict:
        s, qps = self.spec, self.qps(n)
        src = self.pd.reg_mr(self.data, Access.LOCAL_WRITE)
        peer = self.store.get(f"{n}/recv", what="the receiver's queue pairs")
        self.store.set(f"{n}/send", [q.info().to_dict() for q in qps])
        for q, info in zip(qps, peer["qps"]):
            q.connect(QPInfo.from_dict(info))
        self.store.get(f"{n}/ready", what="the receiver to connect")
        rtts = []
        for i in range(s.pings + 1):          # the first one also finds the path: left out
            t0 = time.monotonic()
            qps[0].post_send(SendWR(WROpcode.RDMA_WRITE, [src.sge(0, 1)], wr_id=i, remote_addr=peer["addr"],
                                    rkey=peer["rkey"]))
            self.wait(1, "round-trip probe")
            rtts.append(time.monotonic() - t0)
        writes = chunks(s.size, s.chunk, n)
        t0 = time.monotonic()
        for k, (lane, off, length) in enumerate(writes):
            qps[lane].post_send(SendWR(WROpcode.RDMA_WRITE, [src.sge(off, length)], wr_id=k,
                                       remote_addr=peer["addr"] + off, rkey=peer["rkey"]))
        self.wait(len(writes), f"{n} connections' WRITEs")
        seconds = time.monotonic() - t0
        row = {"connections": n, "seconds": seconds, "rtt_s": statistics.median(rtts[1:]),
               "retransmits": sum(q.counters["retransmits"] for q in qps),
               "timeouts": sum(q.counters["timeouts"] for q in qps)}
        self.store.set(f"{n}/done", row)
        self.store.get(f"{n}/checked", what="the receiver's check")
        for q in qps:
            q.destroy()
        self.pd.dereg_mr(src)
        return row

    def recv(self, n: int) -> dict:
        buf = np.zeros(self.spec.size, dtype=np.uint8)
        dst = self.pd.reg_mr(buf, Access.LOCAL_WRITE | Access.REMOTE_WRITE)
        qps = self.qps(n)
        self.store.set(f"{n}/recv", {"qps": [q.info().to_dict() for q in qps], "addr": dst.addr, "rkey": dst.rkey})
        for q, info in zip(qps, self.store.get(f"{n}/send", what="the sender's queue pairs")):
            q.connect(QPInfo.from_dict(info))
        self.store.set(f"{n}/ready", 1)
        self.store.get(f"{n}/done", timeout=LONGEST_S, what="the sender's transfer")
        wrong = int(np.count_nonzero(buf != self.data))
        self.store.set(f"{n}/checked", 1)
        for q in qps:
            q.destroy()
        self.pd.dereg_mr(dst)
        return {"connections": n, "exact": wrong == 0, "wrong_bytes": wrong}


def run(spec: WanTransferSpec, open=open_device) -> dict:
    """This end's transfers, in turn: its line of output."""
    end = End(spec, open)
    try:
        runs = [(end.send if spec.role == "send" else end.recv)(n) for n in spec.connections]
        out = {"role": spec.role, "runs": runs}
    except (TransferError, StoreTimeout) as exc:
        end.store.set(f"failed/{spec.role}", str(exc))
        out = {"role": spec.role, "error": str(exc)}
    finally:
        end.dev.close()
    return out


def main() -> None:
    print(json.dumps(run(WanTransferSpec.load(sys.argv[1]))), flush=True)


if __name__ == "__main__":
    main()
