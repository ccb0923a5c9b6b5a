"""report.html: one self-contained page a browser renders without the network, with the run's figures in it."""
import os
import shutil
import subprocess

import matplotlib

from testbed.fabric.topo import build
from testbed.results import draw, htmlreport

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--enable-logging=stderr", "--v=0"]


def a_run(folder):
    """A results folder as a run leaves it: results.json's shape, plots/ with a PNG and the fabric."""
    fabric = build("rail-optimized", 2, 2, spines=2)
    os.makedirs(folder / "plots")
    fig, ax = plt.subplots()
    ax.plot([0, 1, 2], [0, 1, 4])
    fig.savefig(folder / "plots" / "utilisation.png")
    plt.close(fig)
    results = {"scenario": "page", "ok": False, "started": "2026-11-24T00:00:00+00:00",
               "fabric": fabric.counts() | {"routing": "ecmp", "failover": True, "datapath": "user",
                                            "host_backend": "netns", "nic_mbps": 5.0, "hb_mbps": 45.0,
                                            "transport": "uroce"},
               "warnings": ["fabric.spines: <ignored>"],
               "workloads": [{"name": "quiet", "type": "collective", "started_s": 0.0, "wall_s": 2.0,
                              "rows": [{"op": "allreduce", "algo": "ring", "ranks": 4, "bytes": 3 << 20,
                                        "seconds": 1.5, "busbw_MBps": 0.9, "bound_busbw_MBps": 1.0,
                                        "bus_ratio": 0.9, "correct": True}]},
                             {"name": "hit", "type": "collective", "started_s": 2.5, "wall_s": 4.0,
                              "rows": [{"op": "allgather", "algo": "ring", "ranks": 4, "bytes": 1000,
                                        "seconds": 3.0, "busbw_MBps": None, "bound_busbw_MBps": 1.0,
                                        "bus_ratio": 0.5, "correct": False}]}],
               "faults": [{"kind": "gpu-crash", "target": "s1g0", "at_s": 4.0, "detected_s": 5.0,
                           "recovered_s": 5.5, "first_success_s": None, "restored_s": None, "recovery": "shrink"}],
               "checks": [{"name": "hit: correct", "ok": False, "detail": "0/1 sizes"}],
               "captures": [{"point": "s0g0/nic", "file": "pcaps/s0g0_nic.pcap", "packets": 10, "roce_packets": 9,
                             "truncated": 0, "bad_icrc": 0, "malformed": 0}]}
    draw.draw_run(fabric, results, str(folder / "plots" / "fabric.svg"))
    return htmlreport.write(results, str(folder), "text <summary>")


def test_the_page_holds_the_runs_figures(tmp_path):
    page = open(a_run(tmp_path)).read()
    assert "FAIL" in page and "fabric.spines: &lt;ignored&gt;" in page and "text &lt;summary&gt;" in page
    assert "<td>3 MiB</td>" in page and "<td>1000 B</td>" in page            # human sizes
    hit = page[page.index("<tr class=\"hit\">"):]
    assert "allgather/ring" in hit.split("</tr>")[0] and "allreduce/ring" not in hit.split("</tr>")[0]
    # the fault fell in workload "hit" (started 2.5 s): its times are relative to that workload
    row = page[page.index("<td class=\"l\">gpu-crash</td>"):].split("</tr>")[0]
    assert "<td class=\"l\">hit</td>" in row and "<td>1.500</td>" in row and "<td>2.500</td>" in row
    assert page.count("data:image/png;base64,") == 1 and page.count("data:image/svg+xml;base64,") == 1
    assert 'href="pcaps/s0g0_nic.pcap"' in page and "http" not in page.replace("http://www.w3.org", "")


def test_the_page_renders_in_headless_chromium(tmp_path):
    from PIL import Image, ImageStat
    chromium = shutil.which("chromium")
    assert chromium, "chromium is missing: scripts/setup installs it"
    page = a_run(tmp_path / "run")
    shot = tmp_path / "page.png"
    p = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
                        "--window-size=1200,2000", f"--screenshot={shot}", f"file://{page}"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and shot.exists(), p.stderr[-2000:]
    console = [line for line in p.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == [], console
    image = Image.open(shot).convert("L")
    stat = ImageStat.Stat(image)
    assert stat.stddev[0] > 20, "the screenshot is blank"                       # text, tables and plots drawn
    dom = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile2'}", "--dump-dom",
                          f"file://{page}"], capture_output=True, text=True, timeout=120).stdout
    assert "Collectives: measured against the analytical bound" in dom and "allgather/ring" in dom
