"""The delay process: one process holds the frames of many delayed links for their propagation delay.

    python -m testbed.fabric.delayd --tag TAG       (started by testbed.fabric.delay; never by hand)

Each line (one direction of one link) is a pair of AF_PACKET sockets in the sending end's namespace: frames
that tc diverted from the end (delayline.py) arrive on the line's helper device; they are held in a timer
queue and sent on the end itself, marked so that the divert lets them through. The process sleeps in epoll
until a frame arrives, a frame is due (a timerfd, nanosecond deadlines) or its owner writes a command; it
never polls. Arrival times are the kernel's receive timestamps, so a late wake-up does not lengthen the
delay.

Commands, one JSON object per line on stdin, each answered by one JSON line on stdout:
  {"op": "add", "line": ID, "netns": PATH|null, "rx": HELPER, "tx": END, "delay_ns": N, "loss": P}
                                    loss (optional): the share of frames dropped at random on arrival
  {"op": "remove", "line": ID}      frames still held are sent at once
  {"op": "stats"}                   frames forwarded, dropped (queue full) and lost (loss) per line
The process exits when stdin closes (its owner is gone) or on SIGTERM.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import select
import signal
import socket
import struct
import sys
import time

from testbed.fabric.linuxcalls import Timer, netns
from testbed.fabric.timerqueue import TimerQueue

MARK = 0x7462646c           # "tbdl": the divert filter lets frames with this mark through
SOL_PACKET = 263
PACKET_VNET_HDR, PACKET_IGNORE_OUTGOING = 15, 23
SO_TIMESTAMPNS = 35         # SCM_TIMESTAMPNS: CLOCK_REALTIME receive time, struct timespec
SO_RCVBUFFORCE = 33
ETH_P_ALL = 0x0003
FRAME_MAX = 65536 + 64      # a GSO frame (the vnet header keeps its segmentation) and its headers
SLACK_NS = 20_000           # frames due this soon leave with the current batch: fewer wake-ups
RCVBUF = 8 << 20


class Line:
    """One direction of one link: the helper device frames are diverted to, and the end they leave from."""

    def __init__(self, name: str, netns_path: str | None, rx: str, tx: str, delay_ns: int, loss: float = 0.0):
        self.name, self.delay_ns, self.loss = name, delay_ns, loss
        self.forwarded = self.send_errors = self.lost = 0
        with netns(netns_path):
            self.rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            self.tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)   # protocol 0: sends only
        try:
            self.bind(rx, tx)
        except OSError:
            self.close()
            raise

    def bind(self, rx: str, tx: str) -> None:
        for s in (self.rx, self.tx):
            s.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)     # checksum offload and GSO survive the trip
            s.setblocking(False)
        self.rx.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        self.rx.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)
        self.rx.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.rx.bind((rx, ETH_P_ALL))
        self.tx.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, MARK)
        self.tx.bind((tx, 0))

    def send(self, frame: bytes) -> None:
        try:
            self.tx.send(frame)
            self.forwarded += 1
        except OSError:         # the end's queue is full, or the end went away: the frame is lost
            self.send_errors += 1

    def close(self) -> None:
        self.rx.close()
        self.tx.close()


def arrival_ns(ancdata, now_mono: int, mono_to_real: int) -> int:
    """The frame's arrival on the monotonic clock, from the kernel's receive timestamp; the read time if there
    is none or it is implausible (stale, or from the future)."""
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
            sec, nsec = struct.unpack("qq", data[:16])
            stamp = sec * 1_000_000_000 + nsec - mono_to_real
            if now_mono - 1_000_000_000 < stamp <= now_mono:
                return stamp
    return now_mono


class DelayProcess:
    def __init__(self, out=sys.stdout):
        self.out = out
        self.lines: dict[int, Line] = {}           # rx socket fd -> line
        self.by_name: dict[str, Line] = {}
        self.queue = TimerQueue()
        self.timer = Timer()
        self.armed: int | None = None
        self.epoll = select.epoll()
        self.epoll.register(self.timer.fd, select.EPOLLIN)
        self.buf = bytearray(FRAME_MAX)
        self.pending = b""

    def reply(self, **answer) -> None:
        self.out.write(json.dumps(answer) + "\n")
        self.out.flush()

    def command(self, cmd: dict) -> None:
        op, name = cmd.get("op"), cmd.get("line")
        try:
            if op == "add":
                if name in self.by_name:
                    raise ValueError(f"line {name} exists")
                loss = float(cmd.get("loss", 0))
                if not 0 <= loss < 1:
                    raise ValueError(f"loss {loss} is not in [0, 1)")
                line = Line(name, cmd.get("netns"), cmd["rx"], cmd["tx"], int(cmd["delay_ns"]), loss)
                self.lines[line.rx.fileno()] = self.by_name[name] = line
                self.epoll.register(line.rx.fileno(), select.EPOLLIN)
            elif op == "remove":
                line = self.by_name.pop(name)
                for frame in self.queue.release(line):
                    line.send(frame)
                if self.lines.pop(line.rx.fileno(), None):
                    self.epoll.unregister(line.rx.fileno())
                line.close()
            elif op == "stats":
                self.reply(ok=True, lines={n: {"forwarded": l.forwarded, "send_errors": l.send_errors, "lost": l.lost,
                                               "dropped": self.queue.dropped.get(l, 0)}
                                           for n, l in self.by_name.items()})
                return
            else:
                raise ValueError(f"unknown op {op!r}")
            self.reply(ok=True, line=name)
        except Exception as exc:       # a bad command is answered, never the end of the process
            self.reply(ok=False, line=name, error=f"{type(exc).__name__}: {exc}")

    def control(self, fd: int) -> bool:
        """Read commands from the owner; False once it has gone (end of input)."""
        data = os.read(fd, 65536)
        if not data:
            return False
        self.pending += data
        *lines, self.pending = self.pending.split(b"\n")
        for raw in lines:
            if raw.strip():
                self.command(json.loads(raw))
        return True

    def receive(self, line: Line) -> None:
        """One frame: epoll reports the socket again while it holds more, and due frames go out in between
        (reading until the socket is empty measured no cheaper: one more system call, and an exception)."""
        try:
            n, anc, _, _ = line.rx.recvmsg_into([self.buf], 64)
        except BlockingIOError:
            return
        except OSError:         # its device is gone (a host's namespace went away): the other lines go on
            self.epoll.unregister(line.rx.fileno())
            del self.lines[line.rx.fileno()]
            return
        if line.loss and random.random() < line.loss:       # lost on the way: a WAN link's loss rate
            line.lost += 1
            return
        now = time.monotonic_ns()
        arrival = arrival_ns(anc, now, time.time_ns() - now)
        self.queue.push(line, bytes(self.buf[:n]), arrival, line.delay_ns)

    def send_due(self) -> None:
        for line, frame in self.queue.due(time.monotonic_ns() + SLACK_NS):
            line.send(frame)
        deadline = self.queue.next_deadline()
        # a later deadline waits for the armed one to fire (one timer call per frame, not two); if the queue
        # empties first, the timer fires once for nothing
        if deadline is not None and (self.armed is None or deadline < self.armed):
            self.timer.arm(deadline)
            self.armed = deadline

    def run(self, control_fd: int) -> None:
        os.set_blocking(control_fd, False)
        self.epoll.register(control_fd, select.EPOLLIN | select.EPOLLHUP)
        while True:
            for fd, _ in self.epoll.poll():
                if fd == control_fd:
                    if not self.control(fd):
                        return
                elif fd == self.timer.fd:
                    self.timer.clear()
                    self.armed = None
                elif fd in self.lines:
                    self.receive(self.lines[fd])
            self.send_due()


def prompt() -> None:
    """Wake up on time on a loaded machine: a frame's delay is the process's scheduling latency too. Real-time
    (lowest priority) where allowed: the process blocks between frames, and the kernel caps real-time use at
    95% of a core; the highest nice level otherwise."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except OSError:
        try:
            os.nice(-20)
        except OSError:
            pass


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="testbed.fabric.delayd")
    p.add_argument("--tag", default="", help="the fabric tag of the owner (shown in ps, for testbed clean)")
    p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    prompt()
    DelayProcess().run(sys.stdin.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
