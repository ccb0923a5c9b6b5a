"""Host programs' output kept in the results folder: the run directory they ran in goes away with the fabric.

RESULTS/hosts/HOST/PROGRAM.stdout and .stderr, PROGRAM the module's last name (collective_rank, flows, probe,
training_rank ...). A program launched several times in a run (a collective, once per size) appends: stdout
holds one JSON line per launch, stderr a header line per launch that printed anything. Nothing is kept for a
fabric without a results folder (`testbed up`).
"""
from __future__ import annotations

import os


def folder(net, host: str) -> str | None:
    out = getattr(net, "out_dir", None)
    return os.path.join(out, "hosts", host) if isinstance(out, (str, os.PathLike)) else None


def keep(net, host: str, program: str, returncode: int | None, out: str, err: str) -> None:
    """Append one launch's stdout and stderr (text) to the host's files."""
    where = folder(net, host)
    if where is None or not (out or err):
        return
    os.makedirs(where, exist_ok=True)
    name = program.rsplit(".", 1)[-1]
    if out:
        with open(os.path.join(where, f"{name}.stdout"), "a") as f:
            f.write(out if out.endswith("\n") else out + "\n")
    if err:
        with open(os.path.join(where, f"{name}.stderr"), "a") as f:
            f.write(f"== {program} (exit {returncode})\n" + (err if err.endswith("\n") else err + "\n"))
