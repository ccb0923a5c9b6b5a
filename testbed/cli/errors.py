"""What every verb of the command line shares: exit statuses, one-line usage errors."""
from __future__ import annotations

import argparse
import os

EXIT_FAILED, EXIT_USAGE = 1, 2


class UsageError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    """argparse that reports bad input as one line and exit status 2 (its own default too)."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def require_machine(doc: dict, verb: str) -> None:
    """What bringing a fabric up needs of the machine (root, Open vSwitch, the scenario's host backend),
    as one-line usage errors."""
    if os.geteuid() != 0:
        raise UsageError(f"`testbed {verb}` needs root (namespaces, Open vSwitch); try sudo")
    from testbed.fabric import backends, ovs
    ovs.require_running()
    try:
        backends.require(doc.get("hosts", "netns"))
    except backends.BackendUnavailable as exc:
        raise UsageError(str(exc)) from None
