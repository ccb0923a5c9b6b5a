"""The delay line's timer queue: each frame leaves at arrival + its link's delay, a link's frames in arrival
order, links with shorter delays overtaking longer ones, and a full link dropping rather than growing."""
from testbed.fabric.timerqueue import TimerQueue


def test_frames_leave_at_their_deadline_in_arrival_order():
    q = TimerQueue()
    for i in range(5):
        q.push("ab", b"%d" % i, arrival_ns=1000, delay_ns=500)      # a burst: one arrival time
    assert q.next_deadline() == 1500
    assert list(q.due(1499)) == []
    assert [f for _, f in q.due(1500)] == [b"0", b"1", b"2", b"3", b"4"]
    assert len(q) == 0 and q.next_deadline() is None


def test_a_shorter_delay_overtakes_a_longer_one_but_never_its_own_frames():
    q = TimerQueue()
    q.push("long", b"l0", 0, 5000)
    q.push("short", b"s0", 100, 1000)
    q.push("long", b"l1", 200, 5000)
    q.push("short", b"s1", 300, 1000)
    assert [(link, f) for link, f in q.due(10_000)] == [("short", b"s0"), ("short", b"s1"),
                                                         ("long", b"l0"), ("long", b"l1")]


def test_due_frames_are_taken_out_up_to_now_only():
    q = TimerQueue()
    for t in range(0, 100, 10):
        q.push("x", b"%d" % t, t, 50)
    assert [f for _, f in q.due(79)] == [b"0", b"10", b"20"]
    assert q.next_deadline() == 80 and q.held["x"] == 7


def test_a_full_link_drops_and_counts_while_others_go_on():
    q = TimerQueue(limit=3)
    assert all(q.push("a", b"f", 0, 10) for _ in range(3))
    assert not q.push("a", b"g", 0, 10)
    assert q.push("b", b"h", 0, 10)
    assert q.dropped == {"a": 1} and q.held == {"a": 3, "b": 1}
    list(q.due(10))
    assert q.push("a", b"i", 20, 10)          # room again once frames have left


def test_release_gives_one_links_frames_in_order_and_keeps_the_rest():
    q = TimerQueue()
    q.push("a", b"a0", 0, 100)
    q.push("b", b"b0", 5, 100)
    q.push("a", b"a1", 10, 100)
    assert q.release("a") == [b"a0", b"a1"]
    assert [(link, f) for link, f in q.due(1000)] == [("b", b"b0")]


def test_an_arrival_time_that_steps_back_never_lets_a_frame_overtake_its_link():
    q = TimerQueue()
    q.push("x", b"0", 1000, 500)
    q.push("x", b"1", 990, 500)         # its timestamp came out a little earlier than the frame before it
    q.push("y", b"y", 900, 500)         # another link is not held back
    q.push("x", b"2", 1200, 500)
    assert [(link, f) for link, f in q.due(1500)] == [("y", b"y"), ("x", b"0"), ("x", b"1")]
    assert [f for _, f in q.due(1700)] == [b"2"]
