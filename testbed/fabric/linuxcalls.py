"""The Linux system calls the testbed needs that Python 3.11's os module lacks: setns, timerfd, loading a BPF
program (the delay line) and writing a BPF map (the pause process), and the parent-death signal (the fabric
process of `testbed up`).

Through ctypes on the C library, so that nothing has to be compiled.
"""
from __future__ import annotations

import contextlib
import ctypes
import os

CLONE_NEWNET = 0x40000000
CLOCK_MONOTONIC = 1
TFD_NONBLOCK = os.O_NONBLOCK
TFD_CLOEXEC = os.O_CLOEXEC
TFD_TIMER_ABSTIME = 1
SYS_BPF = 321               # x86-64
BPF_MAP_UPDATE_ELEM = 2
BPF_PROG_LOAD = 5
BPF_MAP_GET_FD_BY_ID = 14
BPF_PROG_TYPE_SCHED_CLS = 3
PR_SET_PDEATHSIG = 1

_libc = ctypes.CDLL(None, use_errno=True)


def parent_death_signal(signum: int) -> None:
    """Have the kernel send signum to this process when its parent dies (0: no longer)."""
    _check(_libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0))


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _check(result: int) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def setns(fd: int) -> None:
    """Move this thread into the network namespace that fd refers to."""
    _check(_libc.setns(fd, CLONE_NEWNET))


@contextlib.contextmanager
def netns(path: str | None):
    """Run the body in the network namespace at path (/run/netns/NAME, /proc/PID/ns/net), then come back;
    None: stay where we are. Sockets made inside stay in that namespace."""
    if path is None:
        yield
        return
    home = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    target = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        setns(target)
        yield
    finally:
        setns(home)
        os.close(target)
        os.close(home)


class Timer:
    """A timerfd on CLOCK_MONOTONIC (time.monotonic_ns's clock): readable when its deadline has passed, so that
    an epoll loop sleeps until the next frame is due with nanosecond resolution (epoll's own timeout has
    millisecond resolution)."""

    def __init__(self):
        self.fd = _check(_libc.timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC))

    def arm(self, deadline_ns: int | None) -> None:
        """Fire at deadline_ns (monotonic), or never if None."""
        spec = _Itimerspec()
        if deadline_ns is not None:
            deadline_ns = max(deadline_ns, 1)      # 0 would disarm
            spec.it_value = _Timespec(deadline_ns // 1_000_000_000, deadline_ns % 1_000_000_000)
        _check(_libc.timerfd_settime(self.fd, TFD_TIMER_ABSTIME, ctypes.byref(spec), None))

    def clear(self) -> None:
        """Consume the expiry count so that the fd stops being readable."""
        try:
            os.read(self.fd, 8)
        except BlockingIOError:
            pass

    def close(self) -> None:
        os.close(self.fd)


def bpf_load(insns: bytes, prog_type: int = BPF_PROG_TYPE_SCHED_CLS, name: bytes = b"tb_delay") -> int:
    """Load a BPF program (8-byte instructions); returns its fd. The verifier's log is in the error."""
    code = ctypes.create_string_buffer(insns, len(insns))
    license = ctypes.create_string_buffer(b"GPL")
    log = ctypes.create_string_buffer(4096)
    attr = ctypes.create_string_buffer(128)         # union bpf_attr, the PROG_LOAD fields; the rest zero
    ctypes.memmove(attr, (ctypes.c_uint32 * 2)(prog_type, len(insns) // 8), 8)
    ctypes.memmove(ctypes.byref(attr, 8), (ctypes.c_uint64 * 2)(ctypes.addressof(code), ctypes.addressof(license)),
                   16)
    ctypes.memmove(ctypes.byref(attr, 24), (ctypes.c_uint32 * 2)(1, len(log)), 8)        # log level 1
    ctypes.memmove(ctypes.byref(attr, 32), (ctypes.c_uint64 * 1)(ctypes.addressof(log)), 8)
    ctypes.memmove(ctypes.byref(attr, 48), name[:15], len(name[:15]))                     # prog_name
    fd = _libc.syscall(SYS_BPF, BPF_PROG_LOAD, attr, len(attr))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{os.strerror(err)}: {log.value.decode(errors='replace').strip()}")
    return fd


def _bpf(cmd: int, attr) -> int:
    result = _libc.syscall(SYS_BPF, cmd, attr, len(attr))
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def bpf_map_fd(map_id: int) -> int:
    """An fd of the BPF map with this id (a tc program's map, found by its id)."""
    attr = ctypes.create_string_buffer(16)          # map_id, next_id, open_flags
    ctypes.memmove(attr, (ctypes.c_uint32 * 1)(map_id), 4)
    return _bpf(BPF_MAP_GET_FD_BY_ID, attr)


def bpf_map_write(fd: int, key: int, value: bytes) -> None:
    """One element of an array map written (a 4-byte key)."""
    k = (ctypes.c_uint32 * 1)(key)
    v = ctypes.create_string_buffer(value, len(value))
    attr = ctypes.create_string_buffer(32)          # map_fd, (pad), key, value, flags
    ctypes.memmove(attr, (ctypes.c_uint32 * 1)(fd), 4)
    ctypes.memmove(ctypes.byref(attr, 8), (ctypes.c_uint64 * 2)(ctypes.addressof(k), ctypes.addressof(v)), 16)
    _bpf(BPF_MAP_UPDATE_ELEM, attr)
