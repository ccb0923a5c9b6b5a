"""PNG plots of predicted iteration time against HB-domain size and against NIC bandwidth."""
from __future__ import annotations

import os
from dataclasses import replace

import matplotlib

matplotlib.use("Agg")                      # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from testbed.fabric.kinds import RAIL_ONLY, RAIL_OPTIMIZED  # noqa: E402
from testbed.planning.calibration import Calibration  # noqa: E402
from testbed.planning.counts import PlanError  # noqa: E402
from testbed.planning.prediction import FABRICS, Hardware, predict  # noqa: E402

NIC_SWEEP_GBPS = (100, 200, 400, 800, 1600)
STYLES = {RAIL_OPTIMIZED.name: "-", RAIL_ONLY.name: "--"}


def hb_sweep(gpus: int) -> list[int]:
    """HB-domain sizes to plot: powers of two from 2 up to the cluster, that divide it."""
    sizes, k = [], 2
    while k <= min(gpus, 1 << 16):
        if gpus % k == 0:
            sizes.append(k)
        k *= 2
    return sizes


def _series(workloads, hw: Hardware, cal: Calibration, vary: str, values) -> dict:
    out = {}
    for label, (model, plan) in workloads.items():
        label = f"{label}: {model.name} (t={plan.tp} p={plan.pp} d={plan.dp})"
        for fabric in FABRICS:
            ys = []
            for v in values:
                h = replace(hw, **{vary: v})
                try:
                    ys.append(predict(model, plan, h, fabric, cal).iteration)
                except PlanError:
                    ys.append(float("nan"))
            out[(label, fabric)] = ys
    return out


def _plot(path: str, xs, series: dict, xlabel: str, title: str, note: str) -> str:
    labels = list(dict.fromkeys(label for label, _ in series))
    fig, axes = plt.subplots(1, len(labels), figsize=(5.5 * len(labels), 4.2), squeeze=False)
    for ax, label in zip(axes[0], labels):           # one panel per model: their times differ by orders
        for fabric in FABRICS:
            ax.plot(xs, series[(label, fabric)], STYLES[fabric], marker="o", label=fabric)
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs)
        ax.set_xticklabels([str(x) for x in xs], fontsize=7, rotation=45)
        ax.minorticks_off()
        ax.set_xlabel(xlabel)
        ax.set_ylabel("predicted iteration time (s)")
        ax.set_title(label, fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.text(0.01, 0.01, note, fontsize=7)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_all(directory: str, workloads: dict, hw: Hardware, cal: Calibration) -> list[str]:
    """workloads: label -> (ModelShape, Parallelism). Returns the files written."""
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise PlanError(f"cannot create plot directory {directory}: {exc.strerror}") from None
    note = "calibrated: " + cal.source if cal.calibrated else "UNCALIBRATED: every op at its ideal bound"
    sizes = hb_sweep(hw.gpus)
    files = [
        _plot(os.path.join(directory, "iteration_vs_hb_size.png"), sizes,
              _series(workloads, hw, cal, "hb_size", sizes), "HB-domain size K (GPUs)",
              f"{hw.gpus} GPUs, NIC {hw.nic_gbps:g} Gb/s, HB {hw.hb_gbps:g} Gb/s per GPU", note),
        _plot(os.path.join(directory, "iteration_vs_nic_bandwidth.png"), NIC_SWEEP_GBPS,
              _series(workloads, hw, cal, "nic_gbps", NIC_SWEEP_GBPS), "NIC bandwidth per GPU (Gb/s)",
              f"{hw.gpus} GPUs, HB domain {hw.hb_size}, HB {hw.hb_gbps:g} Gb/s per GPU", note),
    ]
    return files
