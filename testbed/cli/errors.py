"""What every verb of the command line shares: exit statuses, one-line usage errors."""
from __future__ import annotations

import argparse

EXIT_FAILED, EXIT_USAGE = 1, 2


class UsageError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    """argparse that reports bad input as one line and exit status 2 (its own default too)."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")
