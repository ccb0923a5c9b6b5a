"""The launcher's word on a job's rank processes: one that ends without its result line (killed, crashed)
is reported in the job's news the moment it ends (hosts/recovery/heartbeat.py, report_exit), so that its
peers fail it within a beat, even when it died before its heartbeats reached anyone: while starting, or in
rendezvous. A scheduler's node agent (torchelastic's, a cluster's) tells a job of a worker's exit the same
way. A rank that ends with its result (done, aborted with an error, or left) is not reported; one started
again (a GPU that came back) is forgotten first.
"""
from __future__ import annotations

import json
import time

from hosts.collectives.rank import news_dir
from hosts.recovery.heartbeat import report_exit
from testbed.runtime.launch import why


def has_result(out: str) -> bool:
    try:
        json.loads(out.strip().splitlines()[-1])
        return True
    except (ValueError, IndexError):
        return False


def reporter(store: str):
    """The on_exit hook (launch.run_on_hosts) of the rank processes of the job whose store is `store`."""
    def ended(host: str, returncode: int, out: str, err: str) -> None:
        if not has_result(out):
            report_exit(news_dir(store), host, time.time(), why(returncode, err))
    return ended


def restarting(store: str, host: str) -> None:
    """A rank process is started again on `host`: what was reported of its previous one no longer holds."""
    report_exit(news_dir(store), host, None)
