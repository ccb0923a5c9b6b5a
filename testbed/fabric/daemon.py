"""A fabric daemon: a helper process of the run (the delay lines, the pause process) that reads one JSON command
per line on its input, answers each with one JSON line, and exits when its input closes."""
from __future__ import annotations

import json
import select
import subprocess
import sys

from testbed import PROJECT_ROOT
from testbed.fabric.links import fabric_tag

REPLY_TIMEOUT_S = 10.0


class Daemon:
    def __init__(self, module: str, reply_timeout_s: float = REPLY_TIMEOUT_S):
        self.reply_timeout_s = reply_timeout_s
        self.proc = subprocess.Popen([sys.executable, "-m", module, "--tag", fabric_tag()], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, cwd=PROJECT_ROOT, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def ask(self, cmd: dict) -> dict:
        """One command and its answer ({"error": "no answer"} if none came in time)."""
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], self.reply_timeout_s)
        return json.loads(self.proc.stdout.readline() or "{}") if ready else {"error": "no answer"}

    def end(self) -> None:
        """Close its input (it exits); kill it if it has not within 5 s."""
        self.proc.stdin.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
