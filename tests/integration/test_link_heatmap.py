"""Integration (root): a run's per-link utilisation over time finds the links its traffic loaded."""
import json
import os
import subprocess
import sys

import pytest

from tests.paths import ROOT

pytestmark = [pytest.mark.root, pytest.mark.alone]   # the loaded links' peak at their rate: CPU headroom

SCENARIO = """
name: heatmap-cross
fabric: {kind: rail-optimized, servers: 2, gpus_per_server: 2, spines: 2, nic_mbps: 10}
routing: {mode: ecmp}
workloads:
  - {type: traffic, name: cross, pattern: pairs, pairs: [[s0g0, s1g1]], protocol: udp, size: 3MiB}
"""


def test_the_loaded_path_is_the_hottest(tmp_path):
    """One paced UDP flow s0g0 -> s1g1 at 0.9 x NIC crosses rail0, one spine and rail1 (patch-port uplinks):
    those four links are the hottest, near 0.9 of their rate, and nothing else carries a tenth of that."""
    path = tmp_path / "heatmap.yaml"
    path.write_text(SCENARIO)
    out = str(tmp_path / "run")
    p = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(path), "--out", out], capture_output=True,
                       text=True, cwd=ROOT, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    with open(os.path.join(out, "link_usage.json")) as f:
        doc = json.load(f)
    peak = {link["link"]: max((u for u in link["utilisation"] if u is not None), default=0) for link in doc["links"]}
    hot = sorted(peak, key=peak.get, reverse=True)[:4]
    assert {"s0g0-rail0", "s1g1-rail1"} <= set(hot), peak
    uplinks = [name.split("-") for name in hot if name.startswith("rail")]     # up rail0 -> spine -> down rail1
    assert sorted(leaf for leaf, _ in uplinks) == ["rail0", "rail1"] and len({s for _, s in uplinks}) == 1, peak
    assert all(0.6 <= peak[name] <= 1.15 for name in hot), peak
    assert all(v < 0.09 for name, v in peak.items() if name not in hot), peak
    # the flow ran after the workloads started (time 0) and for about 3 MiB / 9 Mbit/s = 2.8 s
    first = next(link for link in doc["links"] if link["link"] == "s0g0-rail0")
    busy = [t for t, u in zip(doc["times_s"], first["utilisation"]) if u is not None and u > 0.3]
    assert busy and busy[0] >= -0.6 and 1.5 <= busy[-1] - busy[0] + 0.5 <= 6, (doc["times_s"], first["utilisation"])
    with open(os.path.join(out, "results.json")) as f:
        results = json.load(f)
    assert {h["link"] for h in results["link_usage"]["hottest"][:4]} == set(hot)
    assert "plots/link_heatmap.png" in results["report"] and "link_usage.json" in results["report"]
    # the switches' real OpenFlow port numbers are those `testbed topo --json` gives, every one of them
    topo = subprocess.run([sys.executable, "-m", "testbed.cli", "topo", "rail-optimized", "--servers", "2", "--gpus",
                           "2", "--spines", "2", "--nic-mbps", "10", "--json"], capture_output=True, text=True, cwd=ROOT)
    assert set(results["links"]) == set(json.loads(topo.stdout)["ports"])
