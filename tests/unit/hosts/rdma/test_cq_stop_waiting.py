"""CQ.stop_waiting(): a thread blocked in wait() returns at once, later waits do not block, and what is queued
is still handed out; for both backends' completion queues (the kernel one's pyverbs CQ replaced by a fake)."""
import threading
import time

import pytest

from hosts.rdma import WC, CompletionQueue, WCOpcode, WCStatus
from hosts.rdma.rxe import RxeCQ


class _FakeVerbsCQ:
    """pyverbs' CQ.poll(n) -> (count, [wc]) over a list."""

    def __init__(self):
        self.items: list = []

    def poll(self, n):
        got, self.items = self.items[:n], self.items[n:]
        return len(got), got


def _rxe_cq():
    cq = RxeCQ.__new__(RxeCQ)          # no kernel device: its pyverbs CQ is a fake
    cq.device = type("Dev", (), {"_convert": staticmethod(lambda w: w)})()
    cq._cq, cq._lock, cq._stopped = _FakeVerbsCQ(), threading.Lock(), False
    return cq


def _wc(i):
    return WC(wr_id=i, status=WCStatus.SUCCESS, opcode=WCOpcode.RECV, byte_len=0, qp_num=1)


@pytest.mark.parametrize("make", [CompletionQueue, _rxe_cq], ids=["uroce", "rxe"])
def test_stop_waiting_ends_a_wait_in_progress_and_later_waits_return_at_once(make):
    cq = make()
    got, ended = [], threading.Event()

    def waiter():
        got.append(cq.wait(1, timeout=5.0))
        ended.set()

    threading.Thread(target=waiter, daemon=True).start()
    time.sleep(0.1)
    assert not ended.is_set()                       # it does block until then
    t0 = time.monotonic()
    cq.stop_waiting()
    assert ended.wait(1.0), "the wait did not end"
    assert time.monotonic() - t0 < 0.5 and got == [[]]
    t0 = time.monotonic()
    assert cq.wait(1, timeout=5.0) == [] and time.monotonic() - t0 < 0.5


def test_a_stopped_queue_still_hands_out_what_it_holds():
    cq = CompletionQueue()
    cq.stop_waiting()
    cq._push(_wc(7))
    assert [w.wr_id for w in cq.wait(2, timeout=5.0)] == [7]


def test_deliver_to_hands_every_completion_to_the_sink_in_order_queued_ones_first():
    """uroce's CQ.deliver_to(sink): what was queued goes to the sink at once, later completions as they are made,
    in order, and nothing is left for poll()."""
    cq = CompletionQueue()
    cq._push(_wc(0))
    cq._push(_wc(1))
    seen = []
    cq.deliver_to(seen.append)
    for i in range(2, 5):
        cq._push(_wc(i))
    assert [wc.wr_id for wc in seen] == [0, 1, 2, 3, 4]
    assert cq.poll() == [] and len(cq) == 0
