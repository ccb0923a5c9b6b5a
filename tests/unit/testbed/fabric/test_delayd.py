"""The delay process's arrival times (kernel receive timestamps, read time where they are implausible) and its
command channel, without sockets: a bad command is answered with one line, and the process goes on."""
import io
import json
import socket
import struct

from testbed.fabric import delayd

SEC = 1_000_000_000


def stamp(real_ns: int):
    return [(socket.SOL_SOCKET, delayd.SO_TIMESTAMPNS, struct.pack("qq", real_ns // SEC, real_ns % SEC))]


def test_arrival_is_the_kernel_timestamp_on_the_monotonic_clock():
    now_mono, offset = 50 * SEC, 1_700_000_000 * SEC
    assert delayd.arrival_ns(stamp(now_mono - 300_000 + offset), now_mono, offset) == now_mono - 300_000


def test_arrival_falls_back_to_the_read_time():
    now_mono, offset = 50 * SEC, 1_700_000_000 * SEC
    assert delayd.arrival_ns([], now_mono, offset) == now_mono
    assert delayd.arrival_ns(stamp(now_mono + SEC + offset), now_mono, offset) == now_mono       # future
    assert delayd.arrival_ns(stamp(now_mono - 2 * SEC + offset), now_mono, offset) == now_mono   # stale
    assert delayd.arrival_ns(stamp(7 * SEC), now_mono, offset) == now_mono                       # another clock


def test_bad_commands_are_answered_and_the_process_goes_on():
    out = io.StringIO()
    proc = delayd.DelayProcess(out)
    proc.command({"op": "frobnicate"})
    proc.command({"op": "remove", "line": "nope"})
    proc.command({"op": "add", "line": "1a", "netns": None, "rx": "tb-no-such-dev", "tx": "tb-no-such",
                  "delay_ns": 1000})
    proc.command({"op": "stats"})
    answers = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [a["ok"] for a in answers] == [False, False, False, True]
    assert "unknown op" in answers[0]["error"] and answers[3]["lines"] == {}
    assert proc.by_name == {} and proc.lines == {}


class _Held:
    """A line whose frames come from one end of a datagram socket pair (no devices): what receive reads."""

    def __init__(self, rx, loss):
        self.rx, self.loss, self.lost, self.delay_ns = rx, loss, 0, 1000


def test_a_lossy_line_drops_frames_at_its_rate_and_holds_the_rest():
    rx, tx = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    rx.setblocking(False)
    proc, line, sent = delayd.DelayProcess(io.StringIO()), _Held(rx, 0.2), 4000
    try:
        for n in range(sent):
            tx.send(n.to_bytes(4, "big"))
            proc.receive(line)
    finally:
        rx.close()
        tx.close()
    held = proc.queue.held.get(line, 0)
    assert held + line.lost == sent
    # binomial: 800 expected, standard deviation ~25; five of them either way
    assert abs(line.lost - 0.2 * sent) < 5 * (sent * 0.2 * 0.8) ** 0.5


def test_a_loss_outside_its_range_is_refused():
    out = io.StringIO()
    delayd.DelayProcess(out).command({"op": "add", "line": "1a", "netns": None, "rx": "x", "tx": "y",
                                      "delay_ns": 0, "loss": 1.0})
    answer = json.loads(out.getvalue())
    assert not answer["ok"] and "loss 1.0" in answer["error"]
