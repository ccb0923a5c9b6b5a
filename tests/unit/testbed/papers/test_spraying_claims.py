"""spraying's claims from synthetic rounds: one claim per mode, workload, metric and congestion control, keys
prefixed by set-up, ECMP's as bounds, and a reason wherever a claim is not reproduced."""
from testbed.papers import AT_LEAST, DIFFERS, REPRODUCED, spraying


def row(seconds=4.0, imbalance=1.05, retransmits=0, timeouts=0, out_of_order=0):
    return {"seconds": seconds, "uplink_imbalance": imbalance, "correct": True,
            "transport": {"retransmits": retransmits, "timeouts": timeouts, "out_of_order": out_of_order}}


def a_round(**by_mode):
    """Every mode's rows as spraying's unless `by_mode` gives (workload, cc) -> row for it."""
    out = {}
    for mode in spraying.MODES:
        rows = {(w, cc): row() for w in spraying.WORKLOADS for cc in spraying.CONTROLS}
        rows.update(by_mode.get(mode.replace(":", ""), {}))
        out[mode] = {**rows, "idle": 60.0}
    return out


def test_every_mode_workload_metric_and_control_has_a_claim_keyed_by_its_set_up():
    one_to_one = {c.key for cc in spraying.CONTROLS for c in spraying._claims_of(1, cc, "2MiB", [a_round()])}
    two_to_one = {c.key for c in spraying._claims_of(2, "dcqcn", "2MiB", [a_round()])}
    assert "split2-all-to-all-time" in one_to_one and "dcqcn-ecmp-ring-allreduce-congestion" in one_to_one
    assert len(one_to_one) == 2 * 3 * 2 * 2
    assert all(k.startswith("2to1-dcqcn-") for k in two_to_one) and len(two_to_one) == 12


def test_equal_modes_reproduce_and_ecmp_is_a_bound():
    claims = spraying._claims_of(1, "delay", "2MiB", [a_round(), a_round()])
    assert {c.verdict for c in claims} == {REPRODUCED}
    ecmp = [c for c in claims if c.key.startswith("ecmp-")]
    assert ecmp and all(c.bound == AT_LEAST for c in ecmp)
    assert "congestion: delay, 2 round(s)" in claims[0].config and "5 Mbit/s" in claims[0].config


def test_a_slower_split_or_a_faster_ecmp_differs_and_says_why():
    slow_split = {("all-to-all", "dcqcn"): row(seconds=8.0, imbalance=1.4, timeouts=12)}
    fast_ecmp = {("ring AllReduce", "dcqcn"): row(seconds=2.0)}
    sprayed = {("ring AllReduce", "dcqcn"): row(retransmits=900, out_of_order=4000)}
    claims = {c.key: c for c in spraying._claims_of(1, "dcqcn", "2MiB", [a_round(split2=slow_split, ecmp=fast_ecmp,
                                                                                  spray=sprayed)])}
    time, congestion = claims["dcqcn-split2-all-to-all-time"], claims["dcqcn-split2-all-to-all-congestion"]
    assert time.verdict == DIFFERS and "12 retransmission timeouts" in time.why
    assert congestion.verdict == DIFFERS and "dp_hash" in congestion.why
    ecmp = claims["dcqcn-ecmp-ring-allreduce-time"]
    assert ecmp.verdict == DIFFERS and "out of order" in ecmp.why and "900" in ecmp.why
    assert claims["dcqcn-ecmp-all-to-all-time"].verdict == REPRODUCED      # on the bound


def test_ecmp_congesting_less_than_spraying_is_put_down_to_chance():
    even = {("all-to-all", "delay"): row(imbalance=0.8)}
    claim = {c.key: c for c in spraying._claims_of(1, "delay", "2MiB", [a_round(ecmp=even)])}["ecmp-all-to-all-congestion"]
    assert claim.verdict == DIFFERS and "as evenly as spraying" in claim.why


def test_a_machine_short_of_cpu_is_named_first():
    starved = a_round(split4={("all-to-all", "delay"): row(seconds=9.0)})
    starved["spray"]["idle"] = 5.0
    claim = {c.key: c for c in spraying._claims_of(1, "delay", "2MiB", [starved])}["split4-all-to-all-time"]
    assert claim.verdict == DIFFERS and "short of CPU" in claim.why
