"""A paper's report: paper.json, paper.md and paper.html, one row per claim (the paper's figure, ours with its
spread, the set-up, the verdict and, where they differ, why)."""
from __future__ import annotations

import datetime
import html
import json
import os
from dataclasses import asdict

from testbed.papers import AT_LEAST, AT_MOST, DIFFERS, NOT_RUN, PARTLY, REPRODUCED, Claim, number
from testbed.results.htmlreport import STYLE, table as html_table

HEADERS = ["claim", "paper", "ours", "off", "verdict", "set-up", "where it differs"]


def counts(claims: list[Claim]) -> dict[str, int]:
    return {v: sum(c.verdict == v for c in claims) for v in (REPRODUCED, PARTLY, DIFFERS, NOT_RUN)}


def _paper_text(c: Claim) -> str:
    return {AT_LEAST: ">= ", AT_MOST: "<= "}.get(c.bound, "") + f"{number(c.paper)}{c.unit}"


def _off_text(c: Claim) -> str:
    return "-" if c.off is None else f"{100 * c.off:.1f}% (within {100 * c.tolerance:g}%)"


def _row(c: Claim) -> list[str]:
    ours = c.ours_text() + (c.unit if c.ours else "") + (" (computed)" if c.computed else "")
    return [c.what, _paper_text(c), ours, _off_text(c), c.verdict, c.config, c.why]


def markdown(module, claims: list[Claim], quick: bool) -> str:
    n = counts(claims)
    lines = [f"# {module.TITLE}", "",
             f"`testbed paper {module.NAME}{' --quick' if quick else ''}`, {datetime.date.today().isoformat()}. "
             f"Claims from {module.SOURCE}.", "",
             f"**{n[REPRODUCED]} reproduced, {n[PARTLY]} partly, {n[DIFFERS]} differ"
             + (f", {n[NOT_RUN]} not run" if n[NOT_RUN] else "") + f"** of {len(claims)} claims. A claim is "
             "reproduced when our median is within its tolerance of the paper's figure, partly within twice it.", "",
             "| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    for c in claims:
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in _row(c)) + " |")
    return "\n".join(lines) + "\n"


def page(module, claims: list[Claim], quick: bool) -> str:
    n = counts(claims)
    rows = [[html.escape(x) for x in _row(c)] for c in claims]
    marks = [c.verdict in (DIFFERS, NOT_RUN) for c in claims]
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(module.NAME)}</title>"
            f"<style>{STYLE}</style></head><body><h1>{html.escape(module.TITLE)}</h1>"
            f"<p><code>testbed paper {html.escape(module.NAME)}{' --quick' if quick else ''}</code>, "
            f"{datetime.date.today().isoformat()}. Claims from {html.escape(module.SOURCE)}.</p>"
            f"<p><b>{n[REPRODUCED]} reproduced, {n[PARTLY]} partly, {n[DIFFERS]} differ"
            + (f", {n[NOT_RUN]} not run" if n[NOT_RUN] else "") + f"</b> of {len(claims)} claims.</p>"
            + html_table(HEADERS, rows, left=len(HEADERS), marks=marks) + "</body></html>\n")


def write(module, claims: list[Claim], quick: bool, out_dir: str) -> list[str]:
    """paper.json (every claim with its verdict), paper.md and paper.html in out_dir; returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    doc = {"paper": module.NAME, "title": module.TITLE, "quick": quick, "counts": counts(claims),
           "claims": [{**asdict(c), "median": c.median, "off": c.off, "verdict": c.verdict} for c in claims]}
    written = []
    for name, text in (("paper.json", json.dumps(doc, indent=1) + "\n"), ("paper.md", markdown(module, claims, quick)),
                       ("paper.html", page(module, claims, quick))):
        path = os.path.join(out_dir, name)
        with open(path, "w") as f:
            f.write(text)
        written.append(path)
    return written
