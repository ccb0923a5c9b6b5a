"""The commands, scenarios and links in README.md and docs/*.md stay true.

The convention writers of the docs follow:

- Commands live in fenced ```sh or ```console blocks (in console blocks, the lines that start with "$ ").
  A line ending in a backslash continues on the next; "#" starts a comment. A leading `sudo` and a
  `.venv/bin/` prefix are ignored. ```text blocks are shown, never checked: synopses with placeholders go there.
- `testbed` with the verbs topo, plan, pcap or ls, and any `testbed ... --help`, needs no root and no fabric:
  such a command is RUN and must exit 0. It runs in a scratch directory that sees the repository's files
  (tests/, scenarios/, ...) but has its own docs/img/, so `--draw docs/img/...` and `--plot` write there.
- `testbed run SCENARIO [--set k=v ...]` is VALIDATED, never run: the scenario loads with its overrides and
  passes the checks a run makes before bring-up. Full scenarios in ```yaml blocks (those with `name:` and
  `fabric:`) are validated too, and saved in the scratch directory as NAME.yaml, so a tutorial's
  `testbed run my-experiment.yaml` checks the scenario it just wrote.
- Every other `testbed` command (clean, fault, compare, run --again) must PARSE: a known verb, valid arguments.
- `make T` must name a Makefile target; a program given as a path (scripts/..., .venv/bin/python FILE) must
  exist; `python -m M` must name an importable module. Other programs (vagrant, tshark) are not checked.

Besides: every relative link and image in the pages resolves (anchors included), every page in docs/ is
linked from the README, and the README's catalogue lists every scenario in scenarios/.
"""
from __future__ import annotations

import contextlib
import glob
import importlib.util
import io
import os
import re
import shlex
import subprocess
from dataclasses import dataclass

import pytest
import yaml

from tests.paths import ROOT

PAGES = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
RUN_VERBS = {"topo", "plan", "pcap", "ls"}          # no root, no fabric
FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass(frozen=True)
class Command:
    page: str
    line: int
    argv: tuple

    def __str__(self):
        return f"{os.path.relpath(self.page, ROOT)}:{self.line}: {' '.join(self.argv)}"


def blocks(text: str):
    """(language, first line number, lines) of every fenced block."""
    lang, start, body = None, 0, []
    for number, line in enumerate(text.splitlines(), 1):
        fence = FENCE.match(line.strip())
        if fence and lang is None:
            lang, start, body = fence.group(1) or "none", number + 1, []
        elif line.strip() == "```" and lang is not None:
            yield lang, start, body
            lang = None
        elif lang is not None:
            body.append(line)


def commands_of(page: str, text: str) -> list[Command]:
    found = []
    for lang, start, body in blocks(text):
        if lang not in ("sh", "console"):
            continue
        pending, first = "", start
        for offset, line in enumerate(body):
            if lang == "console" and not pending:
                if not line.startswith("$ "):
                    continue                        # output
                line = line[2:]
            if not pending:
                first = start + offset
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            argv = shlex.split(pending + line, comments=True)
            pending = ""
            if argv and argv[0] == "sudo":
                argv = argv[1:]
            if argv:
                argv[0] = argv[0].removeprefix(".venv/bin/")
                found.append(Command(page, first, tuple(argv)))
    return found


def scenarios_of(text: str) -> list[tuple[int, dict]]:
    found = []
    for lang, start, body in blocks(text):
        if lang == "yaml":
            doc = yaml.safe_load("\n".join(body))
            if isinstance(doc, dict) and "name" in doc and "fabric" in doc:
                found.append((start, doc))
    return found


def runnable(argv) -> bool:
    return argv[0] == "testbed" and len(argv) > 1 and (argv[1] in RUN_VERBS or "--help" in argv or "-h" in argv)


def run_testbed(argv, cwd) -> subprocess.CompletedProcess:
    """`testbed ARGS` through the entry point the console script calls, in this process (Python's start-up
    and the imports would take most of the time otherwise), in directory cwd."""
    from testbed import cli
    out, err, here = io.StringIO(), io.StringIO(), os.getcwd()
    try:
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(list(argv[1:]))
    except SystemExit as exc:                      # --help, and argparse's errors
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.chdir(here)
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def parse_testbed(argv):
    """The parsed arguments, or an AssertionError with argparse's one line."""
    from testbed import cli
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return cli.parser().parse_args(list(argv[1:]))
    except SystemExit as exc:
        raise AssertionError(f"does not parse (exit {exc.code}): {err.getvalue().strip()}") from None


def validate_run(args, cwd):
    from testbed import runner, scenario
    if args.again:
        return
    doc = scenario.load(os.path.join(cwd, args.scenario), args.set or [])
    runner.check(doc, runner.fabric_of(doc))


def makefile_targets() -> set[str]:
    """The Makefile's targets; a pattern rule's as its pattern (paper-%)."""
    with open(os.path.join(ROOT, "Makefile")) as f:
        return {m.group(1) for m in re.finditer(r"^([\w%-]+):", f.read(), re.M)}


def made(target: str, targets: set[str]) -> bool:
    return target in targets or any(t.endswith("%") and target.startswith(t[:-1]) for t in targets)


def check_other(argv, cwd):
    """Commands that are not testbed's: what they name must exist."""
    program = argv[0]
    if program == "make":
        targets = [a for a in argv[1:] if "=" not in a and not a.startswith("-")]
        missing = {t for t in targets if not made(t, makefile_targets())}
        assert not missing, f"no Makefile target {sorted(missing)}"
    if "/" in program:
        assert os.path.exists(os.path.join(cwd, program)), f"no file {program}"
    if program in ("python", "python3") or program.endswith("/python"):
        if len(argv) > 2 and argv[1] == "-m":
            assert importlib.util.find_spec(argv[2]) is not None, f"no module {argv[2]}"
        elif len(argv) > 1 and not argv[1].startswith("-"):
            assert os.path.exists(os.path.join(cwd, argv[1])), f"no file {argv[1]}"


def check(command: Command, cwd: str, ran: dict):
    argv = command.argv
    if argv[0] != "testbed":
        return check_other(argv, cwd)
    if runnable(argv):
        p = ran[command]
        assert p.returncode == 0, f"exit {p.returncode}: {p.stderr.strip()[-500:]}"
        return
    args = parse_testbed(argv)
    if argv[1] == "run":
        validate_run(args, cwd)


# ---- the pages ----

def _read(page):
    with open(page) as f:
        return f.read()


COMMANDS = [c for page in PAGES for c in commands_of(page, _read(page))]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """A directory that sees the repository's files but keeps what the commands write; the pages'
    full scenarios saved in it by name."""
    d = tmp_path_factory.mktemp("docs")
    for entry in os.listdir(ROOT):
        if entry not in ("docs", "results", "plots"):
            os.symlink(os.path.join(ROOT, entry), d / entry)
    (d / "docs" / "img").mkdir(parents=True)
    for page in PAGES:
        for _, doc in scenarios_of(_read(page)):
            with open(d / f"{doc['name']}.yaml", "w") as f:
                yaml.safe_dump(doc, f)
    return str(d)


@pytest.fixture(scope="module")
def ran(scratch):
    """Every runnable command, run once."""
    return {c: run_testbed(c.argv, scratch) for c in COMMANDS if runnable(c.argv)}


@pytest.mark.parametrize("command", COMMANDS, ids=str)
def test_command(command, scratch, ran):
    check(command, scratch, ran)


def test_the_pages_run_commands():
    """The convention is in use: the pages show commands of every kind, and many are run."""
    assert sum(runnable(c.argv) for c in COMMANDS) >= 15
    assert any(c.argv[:2] == ("testbed", "run") for c in COMMANDS)
    assert any(c.argv[0] == "make" for c in COMMANDS)


@pytest.mark.parametrize("page,line,doc", [(p, n, d) for p in PAGES for n, d in scenarios_of(_read(p))],
                         ids=lambda v: os.path.relpath(v, ROOT) if isinstance(v, str) else str(v))
def test_scenario_blocks_validate(page, line, doc, tmp_path):
    from testbed import runner, scenario
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    d = scenario.load(str(path))
    runner.check(d, runner.fabric_of(d))


def anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    out, in_block = set(), False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            in_block = not in_block
        elif not in_block and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def links(text: str):
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if not re.match(r"\w+:", target):
            yield target


@pytest.mark.parametrize("page", PAGES, ids=lambda p: os.path.relpath(p, ROOT))
def test_links_resolve(page):
    text = _read(page)
    for target in links(text):
        path, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        assert os.path.exists(full), f"{target}: no such file"
        if anchor:
            assert anchor in anchors(_read(full)), f"{target}: no heading #{anchor}"


def test_readme_links_every_page_and_lists_every_scenario():
    readme = _read(PAGES[0])
    for page in PAGES[1:]:
        assert f"docs/{os.path.basename(page)}" in readme, f"README does not link {os.path.basename(page)}"
    for path in glob.glob(os.path.join(ROOT, "scenarios", "*.yaml")):
        assert f"`scenarios/{os.path.basename(path)}`" in readme, f"README's catalogue lacks {path}"


# ---- the checker itself catches broken docs ----

BROKEN = """
```sh
testbed topo ring --servers 2 --gpus 2
testbed run scenarios/smoke.yaml --set fabric.servers=0
testbed run scenarios/no_such_scenario.yaml
testbed fault s0g0 explode
make no-such-target
scripts/no-such-script
python -m no_such_module_here
```
"""


@pytest.mark.parametrize("index", range(7))
def test_a_broken_command_fails(index, scratch):
    command = commands_of("BROKEN.md", BROKEN)[index]
    ran = {command: run_testbed(command.argv, scratch)} if runnable(command.argv) else {}
    from testbed.scenario.schema import ScenarioError
    with pytest.raises((AssertionError, ScenarioError)):
        check(command, scratch, ran)


def test_continuations_comments_and_console_prompts():
    text = "```console\n$ sudo .venv/bin/testbed plan \\\n    --table2   # Table II\noutput line\n```\n"
    (command,) = commands_of("x.md", text)
    assert command.argv == ("testbed", "plan", "--table2") and command.line == 2
