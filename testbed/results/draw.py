"""The fabric drawn: `testbed topo ... --draw FILE` and `plots/fabric.svg` of every run.

Switches sit in tiers (spines over rails or ToRs), GPUs are grouped by server inside a box that stands for
the server's HB domain, NIC links take their rail's colour. Given a run's port counters, links are drawn as
thick as the bytes they carried; links and GPUs that a fault hit are marked in red.
"""
from __future__ import annotations

import os

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
matplotlib.rcParams["svg.fonttype"] = "none"       # names stay text in the SVG: searchable, selectable
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import FancyBboxPatch  # noqa: E402

SWITCH_TIER = {"spine": 3.0, "rail": 1.8, "tor": 1.8, "frontend": 3.0}     # front-end beside the spines
HOST_Y = 0.5
SITE_GAP = 2.5             # between sites' spans
WAN_COLOUR = "#8e24aa"
LABELS_UP_TO = 64          # hosts; beyond this the names would overlap


class DrawError(ValueError):
    pass


def layout(fabric) -> dict[str, tuple[float, float]]:
    """x, y of every host and SDN switch: servers left to right, their spares beside them, CPU hosts last; with
    sites, each site so in a span of its own, its switches over it."""
    pos = {}
    for site, (first, last) in site_spans(fabric, pos).items():
        _place_switches(fabric, pos, site, first, last)
    return pos


def site_spans(fabric, pos: dict) -> dict:
    """Place the hosts site by site (one site, None, without sites); returns each site's x span."""
    spans, x = {}, 0.0
    for site in list(fabric.params.sites or {}) or [None]:
        first = x
        hosts = [h for h in fabric.hosts.values() if h.site == site]
        for i in sorted({h.server for h in hosts if h.server is not None}):
            members = sorted((h for h in hosts if h.server == i),
                             key=lambda h: (h.kind != "gpu", h.rank if h.rank is not None else 0, h.name))
            for h in members:
                pos[h.name] = (x, HOST_Y)
                x += 1.0
            x += 0.8                                   # gap between HB domains
        for h in hosts:
            if h.server is None:
                pos[h.name] = (x, HOST_Y)
                x += 1.0
        spans[site] = (first, max(x - 1.8, first + 1.0))
        x += SITE_GAP if site is not None else 0.0
    return spans


def _place_switches(fabric, pos: dict, site, first: float, last: float) -> None:
    width = last - first
    for kind in ("spine", "rail", "tor", "frontend"):
        tier = [s for s in fabric.sdn_switches() if s.kind == kind and s.site == site]
        for k, s in enumerate(tier):
            pos[s.name] = (last + 1.0 if kind == "frontend" else first + (k + 0.5) * width / len(tier),
                           SWITCH_TIER[kind])


def link_colour(fabric, link, palette) -> str:
    if link.kind == "wan":
        return WAN_COLOUR
    switch = link.b if link.b in fabric.switches else link.a
    kind = fabric.switches[switch].kind if switch in fabric.switches else ""
    if link.kind == "nic" and kind in ("rail", "tor"):
        return palette(int(switch.removeprefix(fabric.switches[switch].site or "")[len(kind):]) % palette.N)
    return "#9e9e9e" if link.kind == "uplink" else "#c8c8c8"


def link_bytes(fabric, counters: dict) -> dict:
    """Bytes each link carried, both directions, from a run's "SWITCH:PORT" counters (results.json `links`)."""
    out = {}
    for link in fabric.links:
        for node, port in ((link.a, link.a_port), (link.b, link.b_port)):
            c = counters.get(f"{node}:{port}")
            if c is not None:
                out[link] = c.get("tx_bytes", 0) + c.get("rx_bytes", 0)
                break
    return out


def fault_marks(fabric, faults: list[dict]) -> tuple[set, set]:
    """(links, hosts) that the run's faults hit."""
    from testbed.faults import REGISTRY, FaultError
    links, hosts = set(), set()
    for f in faults:
        try:
            hit_links, hit_hosts = REGISTRY[f["kind"]].hit(fabric, f)
        except FaultError:
            continue                           # a target of another fabric: nothing to mark
        links.update(hit_links)
        hosts.update(hit_hosts)
    return links, hosts


def draw(fabric, path: str, carried: dict | None = None, failed_links=(), failed_hosts=(),
         title: str | None = None) -> str:
    """Write the drawing to path (.svg, .png or .pdf, by its extension); returns path."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".svg", ".png", ".pdf"):
        raise DrawError(f"--draw {path}: the file must end in .svg, .png or .pdf")
    pos = layout(fabric)
    palette = plt.get_cmap("tab10")
    span = max(x for x, _ in pos.values()) + 1.5
    fig, ax = plt.subplots(figsize=(min(max(6.0, span * 0.55), 40) + 2.0, 5.2))
    most = max((carried or {}).values(), default=0)
    for link in fabric.links:
        if link.kind == "hb" or link.a not in pos or link.b not in pos:
            continue                           # the HB domain is the box around a server's GPUs
        (x1, y1), (x2, y2) = pos[link.a], pos[link.b]
        width = 0.6 + 4.4 * carried.get(link, 0) / most if most else 1.0
        style = ":" if link.standby else ("--" if link.kind == "frontend" else "-")
        if link.kind == "wan":          # an arc over the sites, so that it crosses none of their links
            xs = np.linspace(x1, x2, 40)
            ys = y1 + (y2 - y1) * (xs - x1) / ((x2 - x1) or 1) + 0.5 * np.sin(np.pi * (xs - x1) / ((x2 - x1) or 1))
        else:
            xs, ys = [x1, x2], [y1, y2]
        ax.plot(xs, ys, color=link_colour(fabric, link, palette), linewidth=width, linestyle=style,
                zorder=1, solid_capstyle="round")
        if link in failed_links:
            ax.plot([x1, x2], [y1, y2], color="red", linewidth=1.2, linestyle="--", zorder=2)
            ax.plot((x1 + x2) / 2, (y1 + y2) / 2, marker="x", color="red", markersize=9, mew=2, zorder=4)
    draw_hb_domains(ax, fabric, pos)
    for name, (x, y) in pos.items():
        node = fabric.switches.get(name) or fabric.hosts[name]
        is_switch = name in fabric.switches
        colour = "#37474f" if is_switch else {"gpu": "#43a047", "spare": "#b0bec5", "cpu": "#1e88e5"}[node.kind]
        ax.scatter([x], [y], s=260 if is_switch else 120, marker="s" if is_switch else "o", color=colour,
                   edgecolors="black", linewidths=0.6, zorder=3)
        if name in failed_hosts:
            ax.scatter([x], [y], s=220, marker="x", color="red", linewidths=2.5, zorder=5)
        if is_switch or len(fabric.hosts) <= LABELS_UP_TO:
            ax.annotate(name, (x, y), xytext=(0, 11 if is_switch else -15), textcoords="offset points",
                        ha="center", fontsize=7 if is_switch else 6, rotation=0 if is_switch else 45)
    legend = [Line2D([], [], color=palette(j % palette.N), lw=2, label=f"rail{j}")
              for j in range(min(fabric.params.gpus_per_server, 10))
              if fabric.design.rails]
    legend += [Line2D([], [], color="#9e9e9e", lw=2, label="uplink")]
    if fabric.wan_links():
        legend.append(Line2D([], [], color=WAN_COLOUR, lw=2, label="WAN link"))
    draw_sites(ax, fabric, pos)
    if most:
        legend.append(Line2D([], [], color="black", lw=5, label=f"width: bytes carried (max {most / 1e6:.1f} MB)"))
    if failed_links or failed_hosts:
        legend.append(Line2D([], [], color="red", marker="x", lw=0, label="hit by a fault"))
    ax.legend(handles=legend, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    what = f"{len(fabric.params.sites)} sites" if fabric.params.sites else fabric.kind
    ax.set_title(title or f"{what}: {fabric.params.servers} servers x "
                          f"{fabric.params.gpus_per_server} GPUs", fontsize=10)
    ax.set_xlim(-1, span)
    ax.set_ylim(-0.4, 4.0 if fabric.params.sites else 3.6)
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def draw_hb_domains(ax, fabric, pos) -> None:
    for hb in (s for s in fabric.switches.values() if s.kind == "hb"):
        members = [pos[l.a if l.b == hb.name else l.b] for l in fabric.links
                   if l.kind == "hb" and hb.name in (l.a, l.b)]
        if not members:
            continue
        left, right = min(x for x, _ in members), max(x for x, _ in members)
        ax.add_patch(FancyBboxPatch((left - 0.4, HOST_Y - 0.55), right - left + 0.8, 0.8,
                                    boxstyle="round,pad=0.02", facecolor="#fff8e1", edgecolor="#ffb300",
                                    linewidth=0.8, zorder=0))
        ax.annotate(hb.name, ((left + right) / 2, HOST_Y - 0.5), ha="center", va="bottom", fontsize=6,
                    color="#ff8f00")


def draw_run(fabric, results: dict, path: str) -> str:
    """A run's fabric: bytes per link from its counters, what its faults hit."""
    links, hosts = fault_marks(fabric, results.get("faults", []))
    return draw(fabric, path, carried=link_bytes(fabric, results.get("links", {})), failed_links=links,
                failed_hosts=hosts, title=f"{results['scenario']}: {fabric.kind}, bytes carried per link")


def draw_sites(ax, fabric, pos: dict) -> None:
    """A box around each site's hosts and switches, its name and kind at the top."""
    for site, p in (fabric.params._sites or {}).items():
        xs = [pos[n][0] for n in pos if fabric.site_of(n) == site]
        x0, x1 = min(xs) - 0.6, max(xs) + 0.6
        ax.add_patch(FancyBboxPatch((x0, HOST_Y - 0.75), x1 - x0, SWITCH_TIER["spine"] - HOST_Y + 1.1,
                                    boxstyle="round,pad=0.05", facecolor="none", edgecolor="#8e24aa",
                                    linestyle="--", linewidth=0.8, zorder=0))
        ax.annotate(f"site {site} ({p.kind})", ((x0 + x1) / 2, SWITCH_TIER["spine"] + 0.45), ha="center",
                    fontsize=8, color=WAN_COLOUR)
