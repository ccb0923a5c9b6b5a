"""DiLoCo's reference with a membership history: a site that leaves keeps training alone and is absent from the
outer steps, the others' outer steps average their own pseudo-gradients only, and a site back takes the global
state (outer parameters, momentum) before it takes part again. Checked against the steps done by hand with the
same pieces (gradient, inner_update, nesterov, ring_sum)."""
import numpy as np
import pytest

from hosts.collectives import diloco as dl

F32 = np.float32
RUN = dict(count=96, every=4, parts=1, seed=7, inner_lr=0.05, outer_lr=0.7, momentum=0.9, mix=0.5)


def ref(sites, steps, bits=0, **kw):
    return dl.reference("diloco", sites, steps=steps, bits=bits, **RUN, **kw)


def inner(theta, ranks, steps):
    """Inner steps [lo, hi) of one site, by hand."""
    goal = dl.target(RUN["count"], RUN["seed"])
    for t in range(*steps):
        g = dl.sum_grads([dl.gradient(theta, goal, RUN["seed"], r, t) for r in ranks])
        dl.inner_update(theta, g, RUN["inner_lr"], len(ranks))


def test_everyone_in_every_outer_step_is_the_plain_reference():
    sites = [[0, 1], [2], [3, 4]]
    plain, full = ref(sites, 12), ref(sites, 12, members=[[0, 1, 2]] * 3)
    for a, b in zip(plain["theta"] + [plain["outer"]], full["theta"] + [full["outer"]]):
        assert np.array_equal(a, b)


def test_a_site_away_trains_alone_and_the_others_average_without_it():
    """Three sites; site 1 misses outer step 1 (after 8 steps) and is back for outer step 2 after taking the
    state at step 8. By hand: step 1's outer update is the ring sum of sites 0 and 2 over 2, site 1's parameters
    at step 8 are its own (4 inner steps on from outer step 0), and at the end every site holds the outer."""
    sites = [[0], [1, 2], [3]]
    got = ref(sites, 12, members=[[0, 1, 2], [0, 2], [0, 1, 2]], resyncs=[(8, 1)])
    away = ref(sites, 8, members=[[0, 1, 2], [0, 2]])
    first = ref(sites, 4)
    # by hand: after outer step 0 every site holds first["outer"]; 4 inner steps each
    outer, mom = first["outer"].copy(), first["momentum"].copy()
    theta = [outer.copy() for _ in sites]
    for i, ranks in enumerate(sites):
        inner(theta[i], ranks, (4, 8))
    assert np.array_equal(away["theta"][1], theta[1])              # site 1 kept its own progress
    dl.nesterov(outer, mom, dl.ring_sum([outer - theta[0], outer - theta[2]]) / F32(2), RUN["outer_lr"],
                RUN["momentum"])
    assert np.array_equal(away["outer"], outer) and np.array_equal(away["momentum"], mom)
    assert np.array_equal(away["theta"][0], outer) and np.array_equal(away["theta"][2], outer)
    # site 1 back with the global state; outer step 2 with all three
    theta = [outer.copy() for _ in sites]
    for i, ranks in enumerate(sites):
        inner(theta[i], ranks, (8, 12))
    dl.nesterov(outer, mom, dl.ring_sum([outer - th for th in theta]) / F32(3), RUN["outer_lr"], RUN["momentum"])
    assert np.array_equal(got["outer"], outer) and np.array_equal(got["momentum"], mom)
    assert all(np.array_equal(th, outer) for th in got["theta"])
    assert not np.array_equal(got["outer"], ref(sites, 12)["outer"])  # the history changed the result


def test_a_site_back_mid_interval_trains_from_the_state_it_took():
    """Site 1 misses outer step 1 (after 8 steps) and takes the state after 10: its inner step 10 starts from
    the outer parameters of outer step 1, not from its own."""
    sites = [[0, 1], [2, 3]]
    got = ref(sites, 11, members=[[0, 1], [0]], resyncs=[(10, 1)])
    theta = ref(sites, 8, members=[[0, 1], [0]])["outer"].copy()
    inner(theta, sites[1], (10, 11))
    assert np.array_equal(got["theta"][1], theta)


def test_quantised_site_back_restarts_its_error_feedback():
    """The residual is the site's own: cleared when it takes the global state, so its first payload back is
    its pseudo-gradient alone. With 8 bits the run stays exact to itself and all replicas agree at the end."""
    sites = [[0], [1]]
    a = ref(sites, 12, bits=8, members=[[0, 1], [0], [0, 1]], resyncs=[(8, 1)])
    b = ref(sites, 12, bits=8, members=[[0, 1], [0], [0, 1]], resyncs=[(8, 1)])
    assert np.array_equal(a["outer"], b["outer"]) and np.array_equal(a["theta"][0], a["theta"][1])


@pytest.mark.parametrize("members,resyncs,words", [
    ([[0, 1], [0], [0, 1]], [], "without re-synchronising first"),
    ([[0, 1], [0, 1], [0, 1]], [(8, 1)], "without having left"),
    ([[0, 1], [0]], [], "2 outer steps given, the run has 3"),
    ([[0, 1], [], [0, 1]], [], "is not a non-empty list of sites in order"),
    ([[1, 0], [0, 1], [0, 1]], [], "is not a non-empty list of sites in order"),
    ([[0, 1], [0], [0, 1]], [(2, 1)], "is not (inner steps done >= H, a site)"),
    ([[0, 1], [0], [0, 1]], [(8, 1), (9, 1)], "or twice"),
])
def test_impossible_membership_histories_are_named(members, resyncs, words):
    with pytest.raises(ValueError, match="membership history") as e:
        ref([[0], [1]], 12, members=members, resyncs=resyncs)
    assert words in str(e.value)


def test_membership_history_is_diloco_only():
    with pytest.raises(ValueError, match="DiLoCo only"):
        dl.reference("streaming", [[0], [1]], steps=8, bits=0, members=[[0, 1], [0, 1]],
                     **{**RUN, "parts": 2})


@pytest.mark.parametrize("quantize", [0, 8, 4])
def test_ranks_with_rejoin_on_and_no_outage_keep_every_site_in_every_outer_step(quantize):
    """The ranks' membership protocol over the transport's in-memory fabric, no outage: every outer step has
    every site, no handover, and every replica equals the plain reference (quantised too: the leaders' AllGather
    of payloads summed in site order)."""
    import dataclasses

    from hosts.collectives.diloco_rank import run_rank
    from hosts.spec.results import DILOCO_RANK
    from tests.unit.hosts.collectives.test_algorithms import peers_grid, run_ranks
    from tests.unit.hosts.collectives.test_diloco_rank import expected, spec
    import jsonschema

    peers = peers_grid(3, 2)
    s = spec("diloco", [[0, 1], [2, 3], [4, 5]], rejoin=True, steps=8, sync_every=4, quantize=quantize)
    out = run_ranks(peers, lambda c: run_rank(dataclasses.replace(s, rank=c.rank, peers=tuple(peers)), c, c.store))
    want = expected(s)
    for r, o in out.items():
        jsonschema.validate(o, DILOCO_RANK)
        assert o["membership"]["members"] == [[0, 1, 2], [0, 1, 2]] and o["membership"]["events"] == []
        assert o["theta"] == dl.digest(want["theta"][o["site"]]) and o["outer"] == dl.digest(want["outer"]), r
