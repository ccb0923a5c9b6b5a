"""timerfd through ctypes: readable once its deadline has passed, not before, and disarmed by None."""
import select
import time

from testbed.fabric.linuxcalls import Timer


def test_the_timer_fires_at_its_deadline_with_sub_millisecond_resolution():
    timer = Timer()
    try:
        ep = select.epoll()
        ep.register(timer.fd, select.EPOLLIN)
        start = time.monotonic_ns()
        timer.arm(start + 300_000)
        assert ep.poll(5)
        assert time.monotonic_ns() - start >= 300_000
        timer.clear()
        assert ep.poll(0) == []
        timer.arm(time.monotonic_ns() + 10_000_000)
        timer.arm(None)
        assert ep.poll(0.05) == []
    finally:
        timer.close()
