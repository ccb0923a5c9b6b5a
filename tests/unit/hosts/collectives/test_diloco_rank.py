"""DiLoCo's arithmetic and its ranks without a fabric: the outer optimiser by hand, the quantiser and its error
feedback, the ring's order of summation, and whole runs of every variant (ranks are threads over the transport's
in-memory fabric: real RoCEv2 packets, no namespaces) whose parameters must equal the numpy reference bit for bit."""
import dataclasses

import jsonschema
import numpy as np
import pytest

from hosts.collectives import algorithms
from hosts.collectives import diloco as dl
from hosts.collectives.diloco_rank import run_rank
from hosts.spec import DilocoRankSpec
from hosts.spec.results import DILOCO_RANK
from tests.unit.hosts.collectives.test_algorithms import peers_grid, run_ranks

F32 = np.float32


def test_nesterov_is_torch_sgd_nesterov_by_hand():
    outer, mom = np.array([1.0, -2.0], F32), np.zeros(2, F32)
    d1, d2 = np.array([0.5, 0.25], F32), np.array([-1.0, 1.0], F32)
    dl.nesterov(outer, mom, d1, 0.7, 0.9)
    # m1 = d1; outer = 1 - 0.7 (d1 + 0.9 d1)
    assert np.allclose(outer, [1 - 0.7 * 1.9 * 0.5, -2 - 0.7 * 1.9 * 0.25])
    before = outer.copy()
    dl.nesterov(outer, mom, d2, 0.7, 0.9)
    m2 = 0.9 * d1 + d2
    assert np.allclose(mom, m2) and np.allclose(outer, before - 0.7 * (d2 + 0.9 * m2))


def test_diloco_with_h1_lr1_no_momentum_is_ddp():
    """Outer lr 1 without momentum sets the outer parameters to the sites' mean after each step: with H = 1
    and equal sites that is DDP up to float rounding."""
    common = dict(sites=[[0, 1], [2, 3]], count=64, steps=6, every=1, parts=1, seed=3, inner_lr=0.05,
                  outer_lr=1.0, momentum=0.0, mix=0.5, bits=0)
    ddp, di = dl.reference("ddp", **common), dl.reference("diloco", **common)
    assert np.allclose(ddp["theta"][0], di["theta"][0], atol=1e-6)


@pytest.mark.parametrize("bits", [8, 4])
def test_quantize_round_trip_within_half_a_step(bits):
    x = np.random.default_rng(1).standard_normal(1001).astype(F32)
    p = dl.quantize(x, bits)
    assert len(p) == dl.payload_bytes(len(x), bits)
    back = dl.dequantize(p, bits, len(x))
    step = np.max(np.abs(x)) / dl.QMAX[bits]
    assert np.max(np.abs(back - x)) <= step / 2 * 1.0001
    assert np.array_equal(dl.dequantize(dl.quantize(np.zeros(7, F32), bits), bits, 7), np.zeros(7, F32))


@pytest.mark.parametrize("bits", [8, 4])
def test_error_feedback_keeps_the_sum_of_what_was_sent(bits):
    """With feedback, what was sent over k rounds differs from what should have been by the last residual
    only (bounded by one quantisation step); without, the rounding errors add up."""
    rng = np.random.default_rng(2)
    residual = np.zeros(500, F32)
    want = np.zeros(500, np.float64)
    sent_fb, sent_plain = np.zeros(500, np.float64), np.zeros(500, np.float64)
    for _ in range(40):
        d = (rng.standard_normal(500) * 0.01 + 0.003).astype(F32)        # a bias that plain rounding loses
        want += d
        sent_fb += dl.dequantize(dl.with_feedback(d, residual, bits), bits, 500)
        sent_plain += dl.dequantize(dl.quantize(d, bits), bits, 500)
    assert np.allclose(sent_fb + residual, want, atol=1e-5)
    assert np.max(np.abs(sent_fb - want)) < np.max(np.abs(sent_plain - want))


def test_launch_schedules():
    assert [k for k in range(1, 9) if dl.launched("diloco", k, 4, 1, 8)] == [4, 8]
    got = {k: dl.launched("streaming", k, 4, 2, 9) for k in range(1, 10)}
    assert {k: v for k, v in got.items() if v} == {2: [0], 4: [1], 6: [0], 8: [1]}
    assert all(not dl.launched("ddp", k, 4, 1, 8) for k in range(1, 9))


@pytest.mark.parametrize("sites", [2, 3, 5])
def test_ring_sum_is_the_rings_order_bit_for_bit(sites):
    """Float inputs whose sum depends on the order: the ring AllReduce over sites gives exactly ring_sum."""
    xs = [(np.random.default_rng(s).standard_normal(1037) * 10 ** (s % 3)).astype(F32) for s in range(sites)]
    peers = peers_grid(sites, 1)

    def reduce(c):
        c.ring = list(range(sites))
        return algorithms.allreduce(c, xs[c.rank].copy(), "sum", "ring")

    got = run_ranks(peers, reduce)
    want = dl.ring_sum(xs)
    assert all(np.array_equal(got[r], want) for r in range(sites))
    if sites > 2:   # the order matters here: a plain left-to-right sum differs somewhere
        assert not np.array_equal(want, np.sum(np.stack(xs), axis=0))


def spec(variant, sites, **kw):
    base = dict(rank=0, peers=(), store="", sites=tuple(map(tuple, sites)), variant=variant, steps=8, sync_every=4,
                fragments=2, count=2048, seed=5, compute_s=0.0, timeout_s=20)
    return DilocoRankSpec(**{**base, **kw})


def run_variant(variant, servers, per, sites, **kw):
    peers = peers_grid(servers, per)
    s = spec(variant, sites, **kw)
    return run_ranks(peers, lambda c: run_rank(dataclasses.replace(s, rank=c.rank, peers=tuple(peers)), c,
                                               c.store)), s


def expected(s):
    return dl.reference(s.variant, [list(x) for x in s.sites], s.count, s.steps, s.sync_every, s.fragments, s.seed,
                        s.inner_lr, s.outer_lr, s.momentum, s.mix, s.quantize)


@pytest.mark.parametrize("variant,quantize", [("ddp", 0), ("diloco", 0), ("streaming", 0), ("diloco", 8),
                                              ("streaming", 4)])
def test_every_replica_equals_the_reference(variant, quantize):
    sites = [[0, 1], [2, 3]]
    out, s = run_variant(variant, 2, 2, sites, quantize=quantize)
    ref = expected(s)
    for r, o in out.items():
        jsonschema.validate(o, DILOCO_RANK)
        assert o["theta"] == dl.digest(ref["theta"][o["site"]]), f"rank {r}"
        assert o["outer"] == dl.digest(ref["outer"]), f"rank {r}"


def test_three_uneven_sites_stay_exact():
    sites = [[0], [1, 2], [3, 4, 5]]
    out, s = run_variant("diloco", 6, 1, sites, count=999, fragments=1)
    ref = expected(s)
    assert {o["theta"] for o in out.values()} == {dl.digest(ref["theta"][0])}     # synced at the last step


def test_wan_bytes_per_variant():
    """Payload bytes across sites per inner step: DDP every step, DiLoCo 1/H of it, streaming's peak 1/P of
    DiLoCo's; 8-bit a quarter of float32 plus the scale."""
    sites = [[0, 1], [2, 3]]
    n = 2048
    rows = {}
    for variant, q in [("ddp", 0), ("diloco", 0), ("streaming", 0), ("diloco", 8)]:
        out, s = run_variant(variant, 2, 2, sites, count=n, quantize=q)
        per_step = [sum(o["steps"][t]["wan_bytes"] for o in out.values()) for t in range(s.steps)]
        rows[variant, q] = (sum(per_step) / s.steps, max(per_step))
        assert all(o["steps"][t]["wan_bytes"] == 0 for o in out.values() if o["rank"] not in (0, 2)
                   for t in range(s.steps))                                    # only leaders cross
    assert rows["ddp", 0] == (2 * 4 * n, 2 * 4 * n)                            # a 2-ring: each leader sends N
    assert rows["diloco", 0] == (2 * 4 * n / 4, 2 * 4 * n)
    assert rows["streaming", 0][0] <= rows["diloco", 0][0] and rows["streaming", 0][1] == 2 * 4 * n / 2
    assert rows["diloco", 8][1] == 2 * dl.payload_bytes(n, 8)
