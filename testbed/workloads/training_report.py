"""The training iteration's part of the run report: its record in results.json (RESULT_SCHEMA), per iteration
its phases measured against the model in summary.md, and its traffic matrix in plots/traffic_matrix_NAME.png."""
from __future__ import annotations

import os

import numpy as np

from testbed.schema_words import BOOL, INT, NUM, STR, arr, d, nullable, obj

# Its keys in results.json's workload record (the runner adds the common ones).
RESULT_SCHEMA = {
    "plan": obj({"tp": INT, "pp": INT, "dp": INT}), "micro_batches": INT, "schedule": STR, "gpus": INT,
    "fabric": STR, "model": {"type": "object"}, "hardware": {"type": "object"}, "layout": arr({"type": "object"}),
    "rail_aligned": BOOL, "algorithms": {"type": "object"}, "scale": d(NUM, "Model size scale-down."),
    "dilation_link": d(NUM, "Real / emulated NIC rate."), "dilation": d(NUM, "Emulated / real time."),
    "activation_bytes": NUM, "gradient_bytes": NUM,
    "predicted": d({"type": "object"}, "Seconds per iteration and phase, as the model predicts (durations)."),
    "measured": d({"type": "object"}, "Seconds per iteration and phase, measured (durations)."),
    "ratio": {"type": "object"}, "per_iteration": arr({"type": "object"}), "bubble_ratio": {"type": "object"},
    "full_scale": {"type": "object"}, "correct": {"type": "object"}, "per_rank": arr({"type": "object"}),
    "traffic": d({"type": "object"}, "Bytes between GPU pairs per phase (traffic matrix)."),
    "fabric_bytes": INT, "nic_bytes": INT, "spine_bytes": nullable(INT),
}


def report_section(workloads: list[dict]) -> list[str]:
    lines = []
    for w in workloads:
        if "measured" not in w:
            continue
        p = w["plan"]
        lines += [f"## Training iteration {w['name']}: measured against T = Tcomp + Ttp + Tpp + Tdp + Tbubble", "",
                  f"p={p['pp']}, t={p['tp']}, d={p['dp']}, m={w['micro_batches']}, {w['schedule']}; message sizes "
                  f"x{w['scale']:.3g}, so times x{w['dilation']:.3g} of the full-scale cluster.", "",
                  "| phase | predicted s | measured s | ratio | full-scale predicted ms | measured equivalent ms |",
                  "|---|---|---|---|---|---|"]
        for k in ("comp", "tp", "pp", "dp", "bubble", "iteration"):
            r = w["ratio"][k]
            lines.append(f"| {k} | {w['predicted'][k]:.3f} | {w['measured'][k]:.3f} | "
                         f"{'-' if r is None else f'{r:.2f}'} | {w['full_scale']['predicted'][k] * 1e3:.2f} | "
                         f"{w['full_scale']['measured_equivalent'][k] * 1e3:.2f} |")
        b = w["bubble_ratio"]
        lines += ["", f"Bubble ratio (p-1)/(p-1+m) = {b['formula']:.3f}, measured {b['measured']:.3f}. Traffic "
                      f"matrix: `plots/traffic_matrix_{w['name']}.png`.", ""]
    return lines


def plot_traffic_matrix(workload: dict, path: str) -> bool:
    """Heatmaps of the bytes each GPU sent each other GPU in a training iteration (rows: sender), in all and per
    phase, with the HB domains outlined: TP stays inside the squares, PP and DP run along rails between them."""
    tr = workload.get("traffic")
    if not tr:
        return False
    names, n = tr["gpus"], len(tr["gpus"])
    edges = [i for i in range(1, n) if tr["servers"][i] != tr["servers"][i - 1]]
    panels = [("all phases", tr["bytes"]), ("TP AllReduce", tr["tp"]), ("pipeline (PP)", tr["pp"]),
              ("DP AllReduce", tr["dp"])]
    from testbed.figures import plt     # matplotlib only when there is a report to draw
    fig, axes = plt.subplots(1, 4, figsize=(4.2 * 4, 4.4))
    for ax, (title, matrix) in zip(axes, panels):
        kb = np.array(matrix, dtype=float) / 1e3
        im = ax.imshow(np.ma.masked_equal(kb, 0), cmap="viridis", vmin=0)
        for edge in edges:                                  # HB-domain boundaries
            ax.axhline(edge - 0.5, color="red", linewidth=1)
            ax.axvline(edge - 0.5, color="red", linewidth=1)
        ax.set_xticks(range(n), names, rotation=90, fontsize=7)
        ax.set_yticks(range(n), names, fontsize=7)
        ax.set_xlabel("receiver")
        ax.set_title(f"{title}: {kb.sum() / 1e3:.2f} MB", fontsize=9)
        if n <= 16:
            for (a, b), v in np.ndenumerate(kb):
                if v:
                    ax.text(b, a, f"{v:.0f}", ha="center", va="center", fontsize=5,
                            color="black" if v > 0.6 * kb.max() else "white")
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="kB")
    axes[0].set_ylabel("sender")
    p = workload["plan"]
    fig.suptitle(f"{workload['name']}: bytes between GPUs, p={p['pp']} t={p['tp']} d={p['dp']} on "
                 f"{workload['fabric']} (red: HB domains; {workload['traffic']['cross_rail_bytes']} B between "
                 "different servers and rails)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def report_plots(workloads: list[dict], plots_dir: str) -> list[str]:
    written = []
    for w in workloads:
        path = os.path.join(plots_dir, f"traffic_matrix_{w['name']}.png")
        if plot_traffic_matrix(w, path):
            written.append(path)
    return written
