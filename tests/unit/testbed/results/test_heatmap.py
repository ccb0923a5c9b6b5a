"""The per-link heatmap from synthetic samples: rows by tier, rates (counter resets, gaps), faults, reports."""
import json
import os
from types import SimpleNamespace

import pytest

from testbed.fabric.topo import build
from testbed.results import heatmap, htmlreport, report

NIC = 5.0                                # Mbit/s: 312,500 bytes in 0.5 s fill a NIC link
FULL = int(NIC * 1e6 / 8 * 0.5)
T0 = 1_000.0                             # the workloads' start (epoch)


def fabric():
    return build("rail-optimized", 2, 2, spines=2, nic_mbps=NIC, cpu_hosts=1, spares_per_server=1)


def port(f, a, b):
    """The counter name heatmap.rows reads for the link a-b."""
    return next(r.port for r in heatmap.rows(f) if r.link == f"{a}-{b}")


def test_rows_are_grouped_by_tier_and_rail():
    f = fabric()
    rows = heatmap.rows(f)
    assert [r.group for r in rows] == ["rail0"] * 4 + ["rail1"] * 4 + ["cpu"] + ["uplink"] * 4 + ["frontend"] * 2
    assert [r.link for r in rows[:4]] == ["s0g0-rail0", "s1g0-rail0", "s0spare0-rail0", "s1spare0-rail0"]
    assert [r.standby for r in rows[:4]] == [False, False, True, True]
    # a spare's reserved circuit port on rail1 is a row too (its NIC may be switched there)
    assert "s0spare0-rail1" in [r.link for r in rows[4:8]]
    assert not any(r.tier == "hb" for r in rows)          # HB domains are Linux bridges: no counters
    uplink = next(l for l in f.links if (l.a, l.b) == ("rail0", "spine1"))
    assert port(f, "rail0", "spine1") == f"rail0:{uplink.a_port}"              # an uplink is read at its leaf
    assert port(f, "s1g1", "rail1") == "rail1:2" and port(f, "fe0", "rail0").startswith("fe0:")
    uplink = next(r for r in rows if r.tier == "uplink")
    assert uplink.mbps == 2 * NIC / 2                      # the fabric's own uplink rate


def samples(f):
    """0.5 s apart: s0g0's link full out of the switch, then half, then its port re-created (counter restarts),
    then rail1's switch missing from one sample; an uplink at a quarter towards the spine."""
    a, b, up = port(f, "s0g0", "rail0"), port(f, "s0g1", "rail1"), port(f, "rail0", "spine0")
    counts = [{a: (0, 0), b: (0, 0), up: (0, 0)},
              {a: (FULL, 100), b: (0, 0), up: (0, FULL // 4)},
              {a: (FULL + FULL // 2, 200), b: (0, 0), up: (0, FULL // 2)},
              {a: (FULL // 10, 300), up: (0, 3 * FULL // 4)},           # a reset; rail1 did not answer
              {a: (FULL // 10, 300), b: (0, 7), up: (0, FULL)}]
    return [(T0 - 0.5 + 0.5 * k, c) for k, c in enumerate(counts)]


def test_utilisation_per_interval_with_a_reset_and_a_gap():
    f = fabric()
    doc = heatmap.usage(f, samples(f), T0)
    assert doc["times_s"] == [-0.5, 0.0, 0.5, 1.0, 1.5]
    by = {l["link"]: l for l in doc["links"]}
    assert by["s0g0-rail0"]["utilisation"] == [1.0, 0.5, 0.1, 0.0]
    assert by["s0g0-rail0"]["tx_bytes"][1] == FULL and by["s0g0-rail0"]["port"] == "rail0:1"
    assert by["s0g1-rail1"]["utilisation"] == [0.0, 0.0, None, None]
    assert by["s0g1-rail1"]["tx_bytes"][3] is None
    assert by["rail0-spine0"]["utilisation"] == [0.25, 0.25, 0.25, 0.25]       # of an uplink at NIC rate
    assert "s0spare0-rail0" not in by and "s0spare0-rail1" not in by          # parked and idle: no row
    assert [h["link"] for h in heatmap.hottest(doc, 2)] == ["s0g0-rail0", "rail0-spine0"]
    assert heatmap.hottest(doc, 1)[0] == {"link": "s0g0-rail0", "tier": "nic", "peak": 1.0, "mean": 0.4}


def test_a_spare_that_carried_traffic_keeps_its_row():
    f = fabric()
    p = port(f, "s0spare0", "rail1")
    doc = heatmap.usage(f, [(T0, {p: (0, 0)}), (T0 + 1, {p: (FULL, 0)})], T0)
    assert [l["utilisation"] for l in doc["links"] if l["link"] == "s0spare0-rail1"] == [[0.5]]


def test_the_figure_has_a_cell_per_link_and_interval_and_a_line_per_fault_time():
    f = fabric()
    doc = heatmap.usage(f, samples(f), T0)
    faults = [{"kind": "link-down", "target": "rail0-spine0", "at_s": 0.4, "restored_s": 1.2},
              {"kind": "gpu-crash", "target": "s1g1", "at_s": 0.9, "restored_s": None}]
    fig = heatmap.figure(doc, faults, "t")
    ax = fig.axes[0]
    assert ax.collections[0].get_array().shape == (len(doc["links"]), 4)
    vertical = [(line.get_xdata()[0], line.get_linestyle()) for line in ax.lines if line.get_xdata()[0] == line.get_xdata()[1]]
    assert sorted(vertical) == [(0.4, "-"), (0.9, "-"), (1.2, "--")]
    labels = {t.get_text() for t in ax.texts}
    assert {"link-down rail0-spine0", "gpu-crash s1g1", "rail0", "rail1", "uplink"} <= labels
    assert ax.get_xlim() == (-0.5, 1.5)
    heatmap.plt.close(fig)


def test_a_run_writes_the_samples_the_plot_and_the_reports(tmp_path):
    f = fabric()
    os.makedirs(tmp_path / "plots")
    results = {"scenario": "t", "timings": {"workloads_start": T0}, "ok": True, "checks": [], "workloads": [],
               "faults": [{"kind": "link-down", "target": "rail0-spine0", "at_s": 0.4, "detected_s": 0.5,
                           "recovered_s": 0.6, "restored_s": 1.2}],
               "fabric": {"kind": f.kind, "servers": 2, "gpus_per_server": 2, "switches": 7, "nic_mbps": NIC,
                          "hb_mbps": 45, "routing": "ecmp", "datapath": "user"}}
    written = heatmap.write(f, SimpleNamespace(samples=samples(f)), results, str(tmp_path))
    assert [os.path.relpath(p, tmp_path) for p in written] == ["link_usage.json", "plots/link_heatmap.png"]
    with open(tmp_path / "link_usage.json") as fh:
        doc = json.load(fh)
    assert doc["workloads_start"] == T0 and doc["links"][0]["utilisation"] == [1.0, 0.5, 0.1, 0.0]
    with open(tmp_path / "plots" / "link_heatmap.png", "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    assert results["link_usage"]["hottest"][0]["link"] == "s0g0-rail0"
    md = report.summary_markdown(results, "table")
    assert "## Links over time" in md and "| s0g0-rail0 | nic | 1.00 | 0.40 |" in md
    page = open(htmlreport.write(results, str(tmp_path), "table")).read()
    assert "Busiest links" in page and 'href="link_usage.json"' in page and "link_heatmap.png" in page


@pytest.mark.parametrize("n", [0, 1])
def test_too_few_samples_write_nothing(tmp_path, n):
    f = fabric()
    results = {"scenario": "t", "timings": {}}
    assert heatmap.write(f, SimpleNamespace(samples=samples(f)[:n]), results, str(tmp_path)) == []
    assert heatmap.write(f, None, results, str(tmp_path)) == []
    assert "link_usage" not in results and os.listdir(tmp_path) == []
