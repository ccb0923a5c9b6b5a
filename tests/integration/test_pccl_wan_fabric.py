"""Integration (root): a transfer across a long fat pipe over 1 to 8 parallel RC queue pairs of a fixed window, as
PCCL fills a WAN link (scenarios/pccl_wan.yaml: 5 Mbit/s, 20 ms one way, 6-packet windows). One queue pair is
bound by its window per round trip; several fill the pipe; the receiver's bytes are exact every time."""
import pytest

from testbed import runner

pytestmark = [pytest.mark.root, pytest.mark.alone]      # its throughput figures need CPU headroom


def test_one_connection_is_window_bound_and_several_fill_the_pipe(tmp_path):
    from testbed.scenario import load
    from tests.paths import ROOT
    scenario = load(f"{ROOT}/scenarios/pccl_wan.yaml", ["workloads.0.connections=[1, 4, 8]"])
    r = runner.run(scenario, str(tmp_path / "run"), echo=lambda *a: None)
    w = r["workloads"][0]
    for row in w.get("runs", []):
        print(f"{row['connections']} connections: {row['mbps']:.2f} Mbit/s = {row['of_rate']:.2f} of the WAN, "
              f"{row['of_predicted']:.2f} of min(N window / RTT, rate) = {row['predicted_mbps']:.2f}, RTT "
              f"{row['rtt_ms']:.1f} ms, {row['retransmits']} retransmits")
    assert r["ok"], [c for c in r["checks"] if not c["ok"]]
    rows = {row["connections"]: row for row in w["runs"]}
    assert all(row["exact"] and row["wrong_bytes"] == 0 for row in rows.values())
    # the round trip is the WAN's two delays at least
    assert all(row["rtt_ms"] >= 2 * w["delay_us"] / 1e3 for row in rows.values())
    one = rows[1]
    assert one["window_bound"]
    assert 0.6 <= one["mbps"] / one["window_mbps"] <= 1.15        # window x MTU per round trip
    assert one["of_rate"] < 0.5                                    # well under the WAN's rate
    assert w["connections_to_fill"] <= 8
    assert rows[8]["of_rate"] >= 0.8                               # several fill the pipe
    assert rows[8]["mbps"] >= 2.5 * one["mbps"]
