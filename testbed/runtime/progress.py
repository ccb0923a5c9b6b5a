"""What a run shows while it runs: the workload and its step, elapsed time and ETA, faults as they happen,
nccl-tests rows as soon as they are measured.

The runner (and a workload, through `current()`) reports events; a Progress turns them into output at one of
four levels:
  QUIET    nothing but errors (the caller prints the final summary)
  NORMAL   one line per event; on a terminal also a status line kept at the bottom and redrawn in place
  VERBOSE  also each stage of the run and each launch of host programs
  DEBUG    also the traceback of an unexpected error
Lines start with the run's elapsed time, so a log read later says when. Colour only on a terminal and only
when NO_COLOR is unset (https://no-color.org).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import sys
import threading
import time
import traceback

QUIET, NORMAL, VERBOSE, DEBUG = range(4)
_STYLE = {"dim": "2", "bold": "1", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}
_FAULT_WORDS = {"injected": "injected", "repaired": "repaired", "detected": "detected",
                "installed": "rules installed", "recovered": "recovered"}


def duration(seconds: float) -> str:
    """12 s, 3:07, 1:02:03."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    h, m = divmod(s // 60, 60)
    return f"{h}:{m:02d}:{s % 60:02d}" if h else f"{m}:{s % 60:02d}"


def clock(seconds: float) -> str:
    """The elapsed-time prefix of a line: 00:12, 03:07, 1:02:03."""
    s = int(seconds)
    h, m = divmod(s // 60, 60)
    return f"{h}:{m:02d}:{s % 60:02d}" if h else f"{m:02d}:{s % 60:02d}"


def eta(elapsed: float, frac: float) -> float | None:
    """Seconds left if the rest goes at the pace so far; None before anything is done (not known yet) and
    once all is."""
    if frac <= 0 or frac >= 1 or elapsed <= 0:      # nothing done yet, or nothing left
        return None
    return elapsed * (1 - min(frac, 1.0)) / frac


def wants_color(stream) -> bool:
    return _isatty(stream) and not os.environ.get("NO_COLOR")


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """Reports a run's events. stream: where lines go (stdout), err: where errors go (stderr); echo: a
    function taking every line instead (then there is no status line and no colour). refresh_s: how often
    the status line is redrawn on a terminal (None: only on events)."""

    def __init__(self, level: int = NORMAL, stream=None, err=None, echo=None, tty: bool | None = None,
                 color: bool | None = None, clock=time.monotonic, refresh_s: float | None = 0.5):
        self.level, self.echo, self.now = level, echo, clock
        self.stream = stream if stream is not None else (None if echo else sys.stdout)
        self.err = err if err is not None else sys.stderr
        self.tty = False if echo else (_isatty(self.stream) if tty is None else tty)
        self.color = False if echo else (wants_color(self.stream) if color is None else color)
        self.err_color = self.color and (color is not None or wants_color(self.err))
        self.status_shown = self.tty and level >= NORMAL
        self.t0 = clock()
        self.lock = threading.RLock()
        self.workload = None          # (i, n, name, started)
        self.sweep = None             # (done, total, what, frac)
        self.stage_name = ""
        self.header_shown = False
        self._drawn = False
        self._stop = threading.Event()
        self._ticker = None
        if self.status_shown and refresh_s:
            self._ticker = threading.Thread(target=self._tick, args=(refresh_s,), daemon=True, name="tb-progress")
            self._ticker.start()

    # ---- events ----
    def note(self, text: str) -> None:
        """A line worth reading in a normal run (what is brought up, how long it took)."""
        self._line(NORMAL, text)

    def stage(self, name: str) -> None:
        """A stage of the run (bring-up, captures, tear-down, report): in the status line; a line with -v."""
        with self.lock:
            self.stage_name = name
            self._line(VERBOSE, self._paint("dim", f"stage: {name}"))
            self._redraw()

    def workload_started(self, i: int, n: int, name: str, what: str = "") -> None:
        with self.lock:
            self.workload, self.sweep, self.header_shown = (i, n, name, self.now()), None, False
            self.stage_name = "workloads"
            self._line(NORMAL, self._paint("bold", f"[{i}/{n}] {name}") + (f" ({what})" if what else ""))

    def step(self, done: int, total: int, what: str = "", frac: float | None = None) -> None:
        """Progress within the current workload: `done` of `total` steps (sizes of a sweep); frac, the share
        of the work done if steps are unequal (the ETA extrapolates it)."""
        with self.lock:
            self.sweep = (done, total, what, done / total if frac is None and total else frac or 0.0)
            self._redraw()

    def row(self, text: str, header: str | None = None) -> None:
        """A finished nccl-tests row, printed at once (its header before the workload's first row)."""
        with self.lock:
            if header and not self.header_shown:
                for line in header.splitlines():
                    self._line(NORMAL, self._paint("dim", line))
                self.header_shown = True
            for line in text.splitlines():
                self._line(NORMAL, self._paint("dim", line) if line.startswith("#") else line)

    def programs(self, program: str, hosts: list[str]) -> None:
        """Host programs launched (-v)."""
        shown = " ".join(hosts[:8]) + (f" (+{len(hosts) - 8} more)" if len(hosts) > 8 else "")
        self._line(VERBOSE, self._paint("dim", f"  start {program} on {shown}"))

    def fault(self, kind: str, target: str, event: str, t: float, at: float | None = None, how: str = "") -> None:
        """A fault event: injected / repaired at t (seconds after the workloads started, the clock of
        results.json), detected / installed / recovered at t, `at` being when it was injected."""
        after = f" after {(t - at) * 1000:.0f} ms" if at is not None and t - at < 1 else \
            f" after {t - at:.2f} s" if at is not None else ""
        text = f"  fault {kind} {target}: {_FAULT_WORDS.get(event, event)}{after}" + (f" {how}" if how else "") + \
            f" (t={t:.2f} s)"
        self._line(NORMAL, self._paint("yellow", text))

    def workload_done(self, name: str, ok: bool, wall_s: float, what: str = "") -> None:
        with self.lock:
            self.workload, self.sweep, self.stage_name = None, None, ""
            verdict = self._paint("green", "ok") if ok else self._paint("red", "FAILED")
            self._line(NORMAL, f"  {verdict} in {wall_s:.1f} s" + (f": {what}" if what else ""))

    def warning(self, text: str) -> None:
        self._line(NORMAL, self._paint("yellow", f"  warning: {text}"))

    def error(self, text: str, exc: BaseException | None = None) -> None:
        """Shown at every level; with DEBUG, the traceback of exc too."""
        self._line(QUIET, self._paint("red", f"error: {text}") if self.err_color else f"error: {text}", self.err)
        if exc is not None and self.level >= DEBUG:
            for line in "".join(traceback.format_exception(exc)).rstrip("\n").splitlines():
                self._line(QUIET, line, self.err)

    def done(self, ok: bool | None = None) -> None:
        """The run is over: the status line goes, a last line says how long it took (idempotent)."""
        with self.lock:
            if self._stop.is_set():
                return
            self._stop.set()
            self._clear()
            self.status_shown = False
            if ok is not None:
                self._line(NORMAL, f"finished in {duration(self.now() - self.t0)}: " +
                           (self._paint("green", "every check passed") if ok else self._paint("red", "a check failed")))
        if self._ticker is not None and self._ticker is not threading.current_thread():
            self._ticker.join(timeout=2)

    # ---- the status line ----
    def status(self) -> str:
        """[2/6] allreduce-ring · size 2/2 (2097152 B) · 7 s, ETA 6 s · run 00:41"""
        now = self.now()
        parts = []
        if self.workload:
            i, n, name, started = self.workload
            parts.append(f"[{i}/{n}] {name}")
            if self.sweep:
                done, total, what, frac = self.sweep
                parts.append(what or f"{done}/{total} done")
            left = eta(now - started, self.sweep[3]) if self.sweep else None
            parts.append(duration(now - started) + (f", ETA {duration(left)}" if left is not None else ""))
        elif self.stage_name:
            parts.append(self.stage_name)
        parts.append(f"run {clock(now - self.t0)}")
        return " · ".join(parts)

    def _tick(self, every: float) -> None:
        while not self._stop.wait(every):
            with self.lock:
                self._redraw()

    def _redraw(self) -> None:
        if not self.status_shown or self._stop.is_set():
            return
        width = shutil.get_terminal_size((80, 24)).columns - 1      # a wrapped line could not be redrawn
        self._write("\r" + self._paint("cyan", self.status()[:width]) + "\x1b[K")
        self._drawn = True

    def _clear(self) -> None:
        if self._drawn:
            self._write("\r\x1b[K")
            self._drawn = False

    # ---- output ----
    def _line(self, level: int, text: str, stream=None) -> None:
        if self.level < level:
            return
        with self.lock:
            stamp = f"[{clock(self.now() - self.t0)}]"
            line = f"{self._paint('dim', stamp) if stream is None or self.err_color else stamp} {text}"
            if self.echo is not None:
                self.echo(line)
                return
            self._clear()
            if stream is not None:
                self._flush()
                stream.write(line + "\n")
                stream.flush()
            else:
                self._write(line + "\n")
            self._redraw()

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self._flush()

    def _flush(self) -> None:
        with contextlib.suppress(ValueError, OSError):
            self.stream.flush()

    def _paint(self, style: str, text: str) -> str:
        return f"\x1b[{_STYLE[style]}m{text}\x1b[0m" if self.color else text


SILENT = Progress(QUIET, echo=lambda line: None)
_current = SILENT


def current() -> Progress:
    """The reporter of the run in progress (a silent one outside a run): workloads report through it."""
    return _current


@contextlib.contextmanager
def active(report: Progress):
    """Make `report` the current reporter for the duration."""
    global _current
    previous, _current = _current, report
    try:
        yield report
    finally:
        _current = previous
