"""The queue heatmap and the drops by reason, from synthetic samples: rows by tier, fractions of the configured
queue, gaps, counter resets, faults' windows, and what results.json, summary.md and report.html say."""
import json
import os
from types import SimpleNamespace

from testbed.fabric.topo import build
from testbed.monitor.queues import Port
from testbed.results import htmlreport, queues, report, results_schema

T0 = 1_000.0
LIMIT = 100_000
PORTS = [Port("s0g0", "hb0", "s0g0-hb0", "hb", "eth1", "/proc/1/ns/net"),
         Port("rail0", "s1g0", "s1g0-rail0", "nic", "tb-rail0-p2", None),
         Port("s1g0", "rail0", "s1g0-rail0", "nic", "eth0", "/proc/2/ns/net")]


def sampler(ecn=None, pfc=None):
    """0.5 s apart from T0 - 0.5: rail0>s1g0 fills to its limit and drops 40 packets, then its qdisc is re-created
    (counters restart) and it drops 5 more; s1g0>rail0 missing from one sample. The devices' drops, every other
    sample: 9 on rail0>s1g0 during the fault on its link, 2 on the HB port with no fault."""
    q = [{"rail0>s1g0": (0, 0, 0), "s1g0>rail0": (0, 0, 0), "s0g0>hb0": (0, 0, 0)},
         {"rail0>s1g0": (50_000, 34, 0), "s1g0>rail0": (3000, 2, 0), "s0g0>hb0": (0, 0, 0)},
         {"rail0>s1g0": (LIMIT, 68, 40), "s0g0>hb0": (0, 0, 0)},
         {"rail0>s1g0": (20_000, 14, 5), "s1g0>rail0": (0, 0, 0), "s0g0>hb0": (0, 0, 0)},
         {"rail0>s1g0": (0, 0, 5), "s1g0>rail0": (0, 0, 0), "s0g0>hb0": (0, 0, 0)}]
    d = [{"rail0>s1g0": 0, "s0g0>hb0": 0}, {"rail0>s1g0": 9, "s0g0>hb0": 0}, {"rail0>s1g0": 9, "s0g0>hb0": 2}]
    return SimpleNamespace(ports=PORTS, period=0.5, cpu_budget=0.05,
                           samples=[(T0 - 0.5 + 0.5 * k, s) for k, s in enumerate(q)],
                           device_drops=[(T0 - 0.5 + 1.0 * k, s) for k, s in enumerate(d)],
                           kinds={p.name: "tbf" for p in PORTS}, limits={p.name: LIMIT for p in PORTS},
                           mean_period=lambda: 0.5, cpu_share=lambda: 0.021, ecn=ecn or {}, pfc=pfc or {})


def fabric():
    return build("rail-optimized", 2, 2, spines=2, nic_mbps=10)


FAULTS = [{"kind": "link-down", "target": "s1g0-rail0", "at_s": 0.2, "detected_s": 0.3, "recovered_s": 0.4,
           "restored_s": 0.45}]


def test_the_document_has_a_row_per_port_in_tier_order_with_gaps():
    doc = queues.document(sampler(), T0)
    assert [p["port"] for p in doc["ports"]] == ["rail0>s1g0", "s1g0>rail0", "s0g0>hb0"]     # NIC tier first
    assert doc["times_s"] == [-0.5, 0.0, 0.5, 1.0, 1.5] and doc["device_times_s"] == [-0.5, 0.5, 1.5]
    host = doc["ports"][1]
    assert host["backlog_bytes"] == [0, 3000, None, 0, 0] and host["namespace"] == "s1g0"
    assert doc["ports"][0]["namespace"] == "root" and doc["ports"][0]["limit_bytes"] == LIMIT
    assert doc["ports"][0]["device_drops"] == [0, 9, 9] and host["device_drops"] == [None, None, None]
    assert queues.fractions(doc)[0].tolist() == [0.0, 0.5, 1.0, 0.2, 0.0]


def test_drops_by_reason_overflow_fault_and_other():
    doc = queues.document(sampler(), T0)
    s = queues.summary(doc, FAULTS, fabric())
    by = {r["port"]: r for r in s["drops_by_port"]}
    # 40, then the qdisc re-created (counter back to 5): 45 overflow; the device's 9 fell in the fault's window
    assert by["rail0>s1g0"] == {"port": "rail0>s1g0", "link": "s1g0-rail0", "overflow": 45, "fault": 9, "other": 0}
    assert by["s0g0>hb0"] == {"port": "s0g0>hb0", "link": "s0g0-hb0", "overflow": 0, "fault": 0, "other": 2}
    assert "s1g0>rail0" not in by
    assert s["drops"] == {"overflow": 45, "fault": 9, "other": 2}
    # without the fault, the device's drops are the machine's
    assert queues.summary(doc, [], fabric())["drops"] == {"overflow": 45, "fault": 0, "other": 11}
    assert [r["port"] for r in s["fullest"]] == ["rail0>s1g0", "s1g0>rail0"]        # the idle HB port: not named
    assert s["fullest"][0] == {"port": "rail0>s1g0", "link": "s1g0-rail0", "tier": "nic", "limit_bytes": LIMIT,
                               "peak_bytes": LIMIT, "peak_fraction": 1.0, "overflow_drops": 45}


def test_a_fault_that_hit_no_link_of_a_port_leaves_its_drops_other():
    windows = queues.fault_windows([{"kind": "gpu-crash", "target": "s1g0", "at_s": 0.2, "restored_s": None},
                                    {"kind": "link-down", "target": "rail0-spine0", "at_s": 0.1,
                                     "restored_s": None}], fabric())
    assert windows == {"rail0-spine0": [(0.1, float("inf"))]}


def test_the_figure_has_a_cell_per_port_and_sample_and_marks_the_drops():
    doc = queues.document(sampler(), T0)
    fig = queues.figure(doc, FAULTS, "t")
    ax = fig.axes[0]
    assert ax.collections[0].get_array().shape == (3, 5)
    crosses = ax.collections[1].get_offsets().tolist()                  # where rail0>s1g0's queue dropped
    assert crosses == [[0.5, 0.5], [1.0, 0.5]]
    vertical = sorted(line.get_xdata()[0] for line in ax.lines if line.get_xdata()[0] == line.get_xdata()[1])
    assert vertical == [0.2, 0.45]
    assert {"nic", "hb"} <= {t.get_text() for t in ax.texts}
    queues.plt.close(fig)


def test_a_run_writes_the_samples_the_plot_and_the_reports(tmp_path):
    os.makedirs(tmp_path / "plots")
    results = {"scenario": "t", "timings": {"workloads_start": T0}, "ok": True, "checks": [], "workloads": [],
               "faults": FAULTS, "warnings": [],
               "fabric": {"kind": "rail-optimized", "servers": 2, "gpus_per_server": 2, "switches": 4,
                          "nic_mbps": 10, "hb_mbps": 45, "routing": "ecmp", "datapath": "user"}}
    written = queues.write(fabric(), sampler(), results, str(tmp_path))
    assert [os.path.relpath(p, tmp_path) for p in written] == ["queues.json", "plots/queue_heatmap.png"]
    with open(tmp_path / "queues.json") as f:
        assert json.load(f)["ports"][0]["port"] == "rail0>s1g0"
    q = results["queues"]
    assert q["period_s"] == 0.5 and q["sampler_cpu"] == 0.021 and q["ports"] == 3 and q["samples"] == 5
    assert not [e for e in results_schema.errors({"queues": q}) if e.startswith("queues")]
    md = report.queues_markdown(results)
    assert "`plots/queue_heatmap.png`" in md[2] and "45 queue overflow, 9 by faults, 2 other" in md[2]
    assert "| rail0>s1g0 | s1g0-rail0 | 98 | 98 | 1.00 | 45 |" in md
    assert "| rail0>s1g0 | 45 | 9 | 0 |" in md
    page = htmlreport.queues_section(results)
    assert "queues.json" in page and "rail0&gt;s1g0" in page


def test_no_samples_no_files():
    assert queues.write(fabric(), None, {}, "/nonexistent") == []
    assert queues.write(fabric(), SimpleNamespace(samples=[(T0, {})]), {}, "/nonexistent") == []
    assert report.queues_markdown({}) == [] and htmlreport.queues_section({}) == ""


def test_ecn_marks_go_to_the_switch_ports_rows_the_summary_and_summary_md(tmp_path):
    os.makedirs(tmp_path / "plots")
    counted = {"tb-rail0-p2": {"packets": 90, "ect_packets": 80, "marked_packets": 12, "virtual_queue_bytes": 0}}
    results = {"scenario": "t", "timings": {"workloads_start": T0}, "faults": []}
    queues.write(fabric(), sampler(counted), results, str(tmp_path))
    with open(tmp_path / "queues.json") as f:
        rows = {p["port"]: p for p in json.load(f)["ports"]}
    assert rows["rail0>s1g0"]["ecn"] == counted["tb-rail0-p2"]
    assert "ecn" not in rows["s1g0>rail0"]             # a host's end: hosts do not mark
    e = results["queues"]["ecn"]
    assert (e["ports"], e["ect_packets"], e["marked_packets"]) == (1, 80, 12)
    assert e["most_marked"] == [{"port": "rail0>s1g0", "link": "s1g0-rail0", "ect_packets": 80, "marked_packets": 12}]
    assert not [x for x in results_schema.errors({"queues": results["queues"]}) if x.startswith("queues")]
    md = report.queues_markdown(results)
    assert any("12 packets marked CE of 80 ECN-capable" in line for line in md)
    assert "| rail0>s1g0 | s1g0-rail0 | 80 | 12 |" in md
    page = htmlreport.queues_section(results)
    assert "12 packets marked CE of 80 ECN-capable" in page


def test_no_ecn_no_marks_in_the_summary(tmp_path):
    os.makedirs(tmp_path / "plots")
    results = {"scenario": "t", "timings": {"workloads_start": T0}, "faults": []}
    queues.write(fabric(), sampler(), results, str(tmp_path))
    assert "ecn" not in results["queues"] and not any("ECN" in line for line in report.queues_markdown(results))


def test_pfc_pauses_go_to_the_ports_rows_the_summary_and_summary_md(tmp_path):
    """The host's NIC is an upstream port (paused), the switch port into it a queue that sent pauses."""
    os.makedirs(tmp_path / "plots")
    stats = {"gates": {"s1g0>rail0": {"pauses": 7, "paused_s": 1.25}, "s0g0>hb0": {"pauses": 0, "paused_s": 0.0}},
             "points": {"rail0>s1g0": {"xoffs": 7, "asserted_s": 1.25}}}
    results = {"scenario": "t", "timings": {"workloads_start": T0}, "faults": []}
    queues.write(fabric(), sampler(pfc=stats), results, str(tmp_path))
    with open(tmp_path / "queues.json") as f:
        rows = {p["port"]: p for p in json.load(f)["ports"]}
    assert rows["s1g0>rail0"]["pfc"] == {"pauses": 7, "paused_s": 1.25}
    assert rows["rail0>s1g0"]["pfc"] == {"xoffs": 7, "asserted_s": 1.25}
    p = results["queues"]["pfc"]
    assert (p["ports"], p["ports_paused"], p["pauses"], p["paused_s"]) == (2, 1, 7, 1.25)
    assert p["most_paused"] == [{"port": "s1g0>rail0", "link": "s1g0-rail0", "pauses": 7, "paused_s": 1.25}]
    assert not [x for x in results_schema.errors({"queues": results["queues"]}) if x.startswith("queues")]
    md = report.queues_markdown(results)
    assert any("PFC: 1 of 2 upstream ports paused, 7 pauses, 1.25 s paused" in line for line in md)
    assert "| s1g0>rail0 | s1g0-rail0 | 7 | 1.250 |" in md
    assert "PFC: 1 of 2 upstream ports paused" in htmlreport.queues_section(results)
    queues.write(fabric(), sampler(), results, str(tmp_path))
    assert "pfc" not in results["queues"]
