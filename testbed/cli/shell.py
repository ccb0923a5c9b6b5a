"""`testbed exec HOST -- CMD...` and `testbed shell HOST`: a program, or an interactive shell, in a host of the
fabric that is up (its network namespace, or its container for Docker hosts; --netns: the machine's tools in the
host's network namespace whatever the backend). The exit status is the program's."""
from __future__ import annotations

import argparse
import os
import sys

from testbed.cli.errors import UsageError
from testbed.cli.live import attach, require_root

# bash where the host has it (without the user's rc files, whose prompt would hide the host's name), else sh
SHELL = 'if command -v bash >/dev/null; then exec bash --norc -i; else exec sh -i; fi'

NETNS_HELP = ("the machine's own tools in the host's network namespace, instead of the host's programs "
              "(the same for namespace hosts; for Docker hosts, outside the container)")


def register(subparsers) -> None:
    e = subparsers.add_parser("exec", help="run a command in a host of the running fabric")
    e.add_argument("host")
    e.add_argument("--netns", action="store_true", help=NETNS_HELP)
    e.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD", help="the command and its arguments")
    e.set_defaults(func=cmd_exec)
    s = subparsers.add_parser("shell", help="an interactive shell in a host of the running fabric")
    s.add_argument("host")
    s.add_argument("--netns", action="store_true", help=NETNS_HELP)
    s.set_defaults(func=cmd_shell)


def command_of(args) -> list[str]:
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        raise UsageError("give the command to run: testbed exec HOST -- CMD [ARG...]")
    return argv


def cmd_exec(args) -> int:
    argv = command_of(args)
    live = attach()
    live.check_host(args.host)
    require_root("exec")
    return _replace_with(live.enter(args.host, argv, tty=sys.stdin.isatty(), netns=args.netns))


def cmd_shell(args) -> int:
    live = attach()
    live.check_host(args.host)
    require_root("shell")
    os.environ["PS1"] = f"{args.host}# "
    os.environ["TESTBED_HOST"] = args.host
    return _replace_with(live.enter(args.host, ["sh", "-c", SHELL], tty=True, netns=args.netns))


def _replace_with(argv: list[str]) -> int:
    """This process becomes the program: the terminal, signals and the exit status are its own."""
    sys.stdout.flush()
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        raise UsageError(f"{argv[0]}: {exc.strerror}") from None
    return 0    # not reached
