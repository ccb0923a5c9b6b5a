"""spcl-multicast's claims under loss and beside a concurrent job, from synthetic rounds: the expected lost
chunks and their tolerance, the verdicts, and the reasons given where they differ."""
import math

from testbed.papers import DIFFERS, REPRODUCED, spcl_multicast as spcl

MIB = 1 << 20


def gather_row(seconds=1.6, link_bytes=3e6, correct=True, recovered=0, retransmits=0, **kw):
    return {"seconds": seconds, "link_bytes": link_bytes, "correct": correct, "recovered_chunks": recovered,
            "retransmits": retransmits, "bytes": MIB, "count": MIB // 4 // 8, "tree_ratio": 1.0, **kw}


def a_round(recovered=None, lossy_time=1.7, lossy_ring_time=1.75, lossy_ring_bytes=4.6e6, correct=True):
    expected = spcl.chunks_lost_expected(2, 4, gather_row(), spcl.LOSS)
    lossy = {"multicast": gather_row(lossy_time, 3.1e6, correct, round(expected if recovered is None else recovered)),
             "ring-rank": gather_row(lossy_ring_time, lossy_ring_bytes, retransmits=120), "idle": 40.0}
    return {"multicast": gather_row(), "ring-rank": gather_row(1.65, 4.4e6), "ring-rail": gather_row(1.64, 3.5e6),
            "idle": 40.0, "lossy": lossy}


def test_the_chunks_a_loss_takes_count_every_receiver_of_a_dropped_datagram():
    # 2x4, 1 MiB: 8 shards of 128 KiB, 32 chunks of 4096 each, 3 operations, 7 receivers per datagram
    assert spcl.chunks_lost_expected(2, 4, gather_row(), 0.05) == 0.05 * 3 * 8 * 32 * 7
    tolerance = spcl.recovery_tolerance(2, 4, gather_row(), 0.05)
    drops = 0.05 * 3 * 8 * 32
    assert tolerance == round(3 * math.sqrt(drops * 0.95) / drops, 2) == 0.47


def test_loss_claims_reproduce_when_recovery_takes_what_the_loss_took():
    claims = {c.key: c for c in spcl._loss_claims(2, 4, 5, "1MiB", [a_round()])}
    assert set(claims) == {"2x4-loss-exact", "2x4-loss-recovered", "2x4-loss-time", "2x4-loss-bytes"}
    assert {c.verdict for c in claims.values()} == {REPRODUCED}, {k: (c.ours, c.verdict) for k, c in claims.items()}
    assert "chunks recovered by READ" in claims["2x4-loss-exact"].config


def test_a_wrong_result_or_a_recovery_far_from_the_loss_differs_and_says_why():
    claims = {c.key: c for c in spcl._loss_claims(2, 4, 5, "1MiB", [a_round(recovered=0, correct=False,
                                                                            lossy_time=3.0)])}
    assert claims["2x4-loss-exact"].verdict == DIFFERS and "numpy" in claims["2x4-loss-exact"].why
    assert claims["2x4-loss-recovered"].verdict == DIFFERS and claims["2x4-loss-recovered"].why
    assert claims["2x4-loss-time"].verdict == DIFFERS and "retransmitting (120" in claims["2x4-loss-time"].why


def concurrent_round(gather=(1.3, 1.31), other=(1.25, 1.27), alone_bytes=2_000_000, together_bytes=2_000_000,
                     deviation=0.0):
    def job(name, times):
        return {"job": name, "seconds_alone": times[0], "seconds_together": times[1],
                "slowdown": times[1] / times[0], "alone": {"rows": [{"fabric_bytes": alone_bytes}]}, "together": {}}
    links = {"rail0:1": {"gather": together_bytes // 2, "other": 500}, "rail1:3": {"gather": together_bytes // 2}}
    uplinks = {"rail1>spine0": {"gather": 9, "other": 7}, "rail0>spine0": {"gather": 9}}
    return {"jobs": {"gather": job("gather", gather), "other": job("other", other)}, "links": links, "uplinks": uplinks,
            "deviation": deviation, "idle": 35.0}


def test_concurrent_claims_reproduce_when_neither_job_slows_and_the_bytes_stay():
    claims = {c.key: c for c in spcl._concurrent_claims("1MiB", [concurrent_round(), concurrent_round()])}
    assert set(claims) == {"concurrent-gather", "concurrent-other", "concurrent-bytes", "concurrent-split"}
    assert {c.verdict for c in claims.values()} == {REPRODUCED}
    assert spcl.job_switch_bytes(concurrent_round()["links"], "other") == 500
    assert spcl.shared_uplinks(concurrent_round()["uplinks"]) == ["rail1>spine0"]
    assert "spine links (either way) carrying both jobs' bytes: 1 of 2, 1 of 2" in claims["concurrent-gather"].config


def test_a_slowed_job_or_extra_bytes_differ_with_a_reason():
    claims = {c.key: c for c in spcl._concurrent_claims("1MiB", [concurrent_round(other=(1.25, 2.5),
                                                                                  together_bytes=2_400_000,
                                                                                  deviation=0.05)])}
    assert claims["concurrent-gather"].verdict == REPRODUCED
    for key in ("concurrent-other", "concurrent-bytes", "concurrent-split"):
        assert claims[key].verdict == DIFFERS and claims[key].why, key
