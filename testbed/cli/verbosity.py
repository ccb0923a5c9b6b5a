"""-q, -v, --debug: how much a verb says while it works. Accepted before the verb (`testbed -q run x.yaml`) and
after it (`testbed run -q x.yaml`)."""
from __future__ import annotations

import argparse
import logging

from testbed.cli.errors import UsageError
from testbed.runtime.progress import DEBUG, NORMAL, QUIET, VERBOSE


def add_flags(parser: argparse.ArgumentParser, verb: bool = False) -> None:
    """verb=True: a verb's copy of the flags, which must not reset what was given before the verb (argparse
    applies a subcommand's defaults over the main parser's values), so it has none."""
    unset = {"default": argparse.SUPPRESS} if verb else {"default": False}
    g = parser.add_argument_group("output")
    g.add_argument("-q", "--quiet", action="store_true", help="print only the final summary and errors", **unset)
    g.add_argument("-v", "--verbose", action="store_true", help="also print each stage and host program start",
                   **unset)
    g.add_argument("--debug", action="store_true", help="like -v, with full tracebacks of unexpected errors "
                                                        "and DEBUG logging", **unset)


def level(args) -> int:
    quiet, verbose, debug = (getattr(args, k, False) for k in ("quiet", "verbose", "debug"))
    if quiet and (verbose or debug):
        raise UsageError("-q contradicts -v and --debug: give one")
    return DEBUG if debug else VERBOSE if verbose else QUIET if quiet else NORMAL


def configure(args) -> int:
    """Check the flags; --debug also logs at DEBUG. Returns the level."""
    n = level(args)
    if n >= DEBUG:
        logging.basicConfig(level=logging.DEBUG, format="%(asctime)s %(name)s %(levelname)s: %(message)s")
    return n
