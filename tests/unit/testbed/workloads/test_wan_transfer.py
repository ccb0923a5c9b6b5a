"""The `wan_transfer` workload without a fabric: its ends and bad input (one line each, exit 2 from the command),
the window / round-trip prediction, and its rows and checks from the two ends' outputs."""
import jsonschema
import pytest

from hosts.agents.wan_transfer import chunks, payload
from hosts.spec.results import WAN_TRANSFER
from testbed.cli import main
from testbed.fabric.topo import build
from testbed.results import results_schema
from testbed.scenario.schema import ScenarioError
from testbed.workloads import wan_transfer as wt

SITES = {"eu": {"servers": 1}, "us": {"servers": 1}}
FABRIC = build("clos", 2, 2, nic_mbps=40, sites=SITES, wan=[{"a": "eu", "b": "us", "mbps": 5, "delay_us": 20000}])


def test_the_ends_default_to_the_first_host_of_each_site():
    a, b, link = wt.ends(FABRIC, wt.settings({"type": "wan_transfer"}))
    assert (a.name, b.name, link.name, link.mbps, link.delay_us) == ("s0g0", "s1g0", "euspine0-usspine0", 5, 20000)


@pytest.mark.parametrize("change,message", [
    ({"to": "s0g1"}, "wan_transfer: s0g0 and s0g1 are both in site 'eu'; `to` must be in another site"),
    ({"from": "s9g9"}, "wan_transfer from: unknown GPU host 's9g9' (e.g. s0g0, s1g0)"),
    ({"size": "128KiB", "connections": [1, 4]},
     "wan_transfer: 4 connections need at least as many chunks: size 128KiB is 2 chunk(s) of 64KiB"),
])
def test_what_cannot_run_is_refused_in_one_line(change, message):
    with pytest.raises(ScenarioError) as err:
        wt.validate(FABRIC, {"type": "wan_transfer", **change})
    assert str(err.value) == message


def test_a_fabric_without_sites_is_refused():
    with pytest.raises(ScenarioError, match="needs a fabric with sites joined by WAN links"):
        wt.validate(build("clos", 2, 2), {"type": "wan_transfer"})


@pytest.mark.parametrize("workload,line", [
    ("{type: wan_transfer, connections: [0, 2]}", "workloads.0.connections.0: 0 is less than the minimum of 1"),
    ("{type: wan_transfer, connections: []}", "workloads.0.connections"),
    ("{type: wan_transfer, window: 0}", "workloads.0.window: 0 is less than the minimum of 1"),
    ("{type: wan_transfer, to: s0g1}", "`to` must be in another site"),
    ("{type: wan_transfer, size: 12parsecs}", "size"),
])
def test_the_command_says_it_in_one_line_and_exits_2(capsys, tmp_path, workload, line):
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nfabric: {kind: clos, servers: 2, gpus_per_server: 2, sites: {eu: {servers: 1}, "
                    "us: {servers: 1}}, wan: [{a: eu, b: us, mbps: 5, delay_us: 20000}]}\n"
                    f"workloads:\n  - {workload}\n")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and line in err[0], err


def test_the_prediction_is_the_windows_per_round_trip_up_to_the_rate():
    # 6 packets of 1 KiB per 40 ms: 1.2288 Mbit/s; the 5 Mbit/s link carries 5 x 1024 / 1082 in payload
    assert wt.window_bps(1, 6, 1024, 0.04) == pytest.approx(1.2288e6)
    assert wt.payload_bps(5, 1024) == pytest.approx(5e6 * 1024 / 1082)
    assert wt.predicted_bps(1, 6, 1024, 0.04, 5) == pytest.approx(1.2288e6)
    assert wt.predicted_bps(2, 6, 1024, 0.04, 5) == pytest.approx(2.4576e6)
    assert wt.predicted_bps(8, 6, 1024, 0.04, 5) == pytest.approx(wt.payload_bps(5, 1024))
    # the bandwidth-delay product, 4.73 Mbit/s x 40 ms = 23.7 kB, needs 4 windows of 6 KiB
    assert wt.connections_to_fill(6, 1024, 0.04, 5) == 4
    assert wt.connections_to_fill(100, 1024, 0.04, 5) == 1


def test_the_writes_are_striped_over_the_queue_pairs_and_cover_the_payload():
    writes = chunks(200_000, 65536, 3)
    assert [q for q, _, _ in writes] == [0, 1, 2, 0]
    assert sum(n for _, _, n in writes) == 200_000 and writes[-1][1:] == (196608, 3392)
    assert (payload(1000, 7) == payload(1000, 7)).all() and (payload(1000, 7) != payload(1000, 8)).any()


def test_rows_and_checks_from_both_ends():
    sent = [{"connections": 1, "seconds": 4.0, "rtt_s": 0.04, "retransmits": 0, "timeouts": 0},
            {"connections": 8, "seconds": 1.0, "rtt_s": 0.04, "retransmits": 2, "timeouts": 0}]
    received = [{"connections": 1, "exact": True, "wrong_bytes": 0}, {"connections": 8, "exact": False,
                                                                       "wrong_bytes": 3}]
    for doc in ({"role": "send", "runs": sent}, {"role": "recv", "runs": received}, {"role": "send", "error": "x"}):
        jsonschema.validate(doc, WAN_TRANSFER)
    rows = wt.rows(sent, received, 6, 1024, 512 * 1024, 5)
    one, eight = rows
    assert one["mbps"] == pytest.approx(512 * 1024 * 8 / 4.0 / 1e6) and one["window_bound"]
    assert one["of_predicted"] == pytest.approx(one["mbps"] / 1.2288)
    assert not eight["window_bound"] and eight["of_rate"] == pytest.approx(eight["mbps"] / 5)
    result = {"runs": rows, "errors": [], "size": 512 * 1024, "from": "s0g0", "to": "s1g0"}
    checks = {c["name"]: c for c in wt.checks(result)}
    assert checks["completed"]["ok"] and not checks["data exact"]["ok"]
    assert checks["data exact"]["detail"] == "8 connections: 3 bytes differ"
    record = {**result, "type": "wan_transfer", "wan_link": "euspine0-usspine0", "wan_mbps": 5, "delay_us": 20000,
              "window": 6, "mtu": 1024, "sites": ["eu", "us"]}
    assert "8: " in wt.summary(record) and "DATA DIFFER" in wt.summary(record)
    assert len(wt.tables(record)[0].splitlines()) == 4
    # the record fits results.json's schema
    jsonschema.validate({**record, "name": "w", "mtu": 1024, "window_bytes": 6144, "wan_payload_mbps": 4.73,
                         "checks": list(checks.values()), "ok": False, "started_s": 0.0, "wall_s": 9.0,
                         "cpu_bound": False}, results_schema.workload())
