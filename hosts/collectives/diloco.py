"""DiLoCo's arithmetic, shared by the ranks (diloco_rank.py) and the reference the testbed checks them against.

A replica holds float32 parameters `theta`; the outer parameters `outer` (theta at the last synchronisation, the
same on every replica) with the outer optimiser's momentum; and, when the exchange is quantised, an error-feedback
residual. The pieces:

    initial / target            the seeded starting parameters and the optimum the synthetic loss pulls toward
    gradient                    a seeded, integer-valued gradient of 0.5 |theta - target|^2 plus noise per rank
                                and step: integers, so a sum over any number of ranks in any order is exact
    inner_update                SGD on the data-parallel sum of the gradients
    nesterov                    the outer optimiser (DiLoCo's): Nesterov momentum on the pseudo-gradient
    merge                       Streaming DiLoCo's mix of a fragment's local and freshly synchronised values
    quantize / dequantize       symmetric 8- or 4-bit with one float32 scale per exchange, 4-bit packed
    fragments / launched        the P parameter fragments and which ones a step launches (Streaming DiLoCo)
    ring_sum                    the sum a ring AllReduce over sites 0..S-1 computes, in its exact order
    ordered_sum                 the sum of dequantised payloads in site order (the quantised exchange's)
    reference                   the whole run simulated in numpy: every site's parameters after the last step,
                                with a membership history if sites left and rejoined (check_membership)

The pseudo-gradients are floats, so their sum depends on the order of the additions: the cross-site ring's order
(ring_sum) is the one the reference reproduces, which is what makes the check exact rather than approximate.
"""
from __future__ import annotations

import hashlib

import numpy as np

from hosts.collectives.groups import bounds

F32 = np.float32
QMAX = {8: 127, 4: 7}


def initial(count: int, seed: int) -> np.ndarray:
    return np.random.default_rng([seed, 0]).standard_normal(count).astype(F32)


def target(count: int, seed: int) -> np.ndarray:
    return np.random.default_rng([seed, 1]).standard_normal(count).astype(F32)


def gradient(theta: np.ndarray, goal: np.ndarray, seed: int, rank: int, step: int) -> np.ndarray:
    """rint(4 (theta - goal)), clipped to +-6, plus a rank's and step's noise in [-2, 2]: integers below 2^24
    over any realistic world, so float32 sums of them are exact in any order."""
    noise = np.random.default_rng([seed, 2, rank, step]).integers(-2, 3, len(theta))
    return (np.clip(np.rint(F32(4) * (theta - goal)), -6, 6) + noise).astype(F32)


def inner_update(theta: np.ndarray, grad_sum: np.ndarray, lr: float, ranks: int) -> None:
    theta -= F32(lr / ranks) * grad_sum


def nesterov(outer: np.ndarray, momentum: np.ndarray, delta: np.ndarray, lr: float, mu: float) -> None:
    """torch.optim.SGD(nesterov=True) on the pseudo-gradient delta: m = mu m + delta; outer -= lr (delta + mu m)."""
    momentum *= F32(mu)
    momentum += delta
    outer -= F32(lr) * (delta + F32(mu) * momentum)


def merge(theta: np.ndarray, outer: np.ndarray, mix: float) -> None:
    """theta = mix theta + (1 - mix) outer: what a fragment keeps of the local steps taken while it synced."""
    theta[:] = F32(mix) * theta + F32(1 - mix) * outer


def quantize(x: np.ndarray, bits: int) -> np.ndarray:
    """x as uint8 bytes: its float32 scale, then one signed code per element (two per byte at 4 bits)."""
    scale = F32(np.max(np.abs(x)) / QMAX[bits]) if len(x) else F32(0)
    codes = np.zeros(len(x), np.int8) if scale == 0 else \
        np.clip(np.rint(x / scale), -QMAX[bits], QMAX[bits]).astype(np.int8)
    if bits == 4:
        nib = (codes + 8).astype(np.uint8)
        nib = np.concatenate([nib, np.zeros(len(nib) % 2, np.uint8)])
        codes = (nib[0::2] | (nib[1::2] << 4)).view(np.int8)
    return np.concatenate([np.frombuffer(scale.tobytes(), np.uint8), codes.view(np.uint8)])


def dequantize(payload: np.ndarray, bits: int, count: int) -> np.ndarray:
    scale = payload[:4].view(F32)[0]
    body = payload[4:]
    if bits == 4:
        codes = np.empty(2 * len(body), np.int8)
        codes[0::2], codes[1::2] = (body & 15).astype(np.int8) - 8, (body >> 4).astype(np.int8) - 8
        codes = codes[:count]
    else:
        codes = body.view(np.int8)
    return codes.astype(F32) * scale


def payload_bytes(count: int, bits: int) -> int:
    return 4 + (count if bits == 8 else (count + 1) // 2)


def with_feedback(delta: np.ndarray, residual: np.ndarray, bits: int) -> np.ndarray:
    """Quantise delta plus what earlier rounds' quantisation left out; keep the new remainder in `residual`."""
    send = delta + residual
    payload = quantize(send, bits)
    residual[:] = send - dequantize(payload, bits, len(send))
    return payload


def fragments(count: int, parts: int) -> list[slice]:
    return [slice(lo, hi) for lo, hi in bounds(count, parts)]


def launched(variant: str, done: int, every: int, parts: int, steps: int) -> list[int]:
    """The fragments whose synchronisation starts once `done` inner steps are done. DiLoCo: all parameters (one
    fragment) every H steps. Streaming: fragment p when done = (p + 1) H / P (mod H), so the P fragments take
    turns at even spacing; none after the last step (its exchange would have no step to overlap)."""
    if variant == "diloco":
        return [0] if done % every == 0 else []
    if variant == "streaming" and done < steps:
        return [p for p in range(parts) if done % every == (p + 1) * (every // parts) % every]
    return []


def ring_sum(xs: list[np.ndarray]) -> np.ndarray:
    """What ring AllReduce (groups.ring_reduce_scatter, ring 0..S-1) sums: segment k is accumulated along the
    ring starting at position k+1, each position adding its own values to the partial sum it receives."""
    s = len(xs)
    out = xs[0].copy()
    for k, (lo, hi) in enumerate(bounds(len(out), s)):
        acc = xs[(k + 1) % s][lo:hi].copy()
        for j in range(2, s + 1):
            acc = np.add(xs[(k + j) % s][lo:hi], acc)
        out[lo:hi] = acc
    return out


def ordered_sum(payloads: list[np.ndarray], bits: int, count: int) -> np.ndarray:
    total = dequantize(payloads[0], bits, count)
    for p in payloads[1:]:
        total = total + dequantize(p, bits, count)
    return total


def digest(x: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest()[:16]


def loss(theta: np.ndarray, goal: np.ndarray) -> float:
    return float(np.mean((theta.astype(np.float64) - goal) ** 2) / 2)


def check_membership(variant: str, sites: int, syncs: int, members: list[list[int]],
                     resyncs: list[tuple[int, int]], every: int) -> None:
    """A membership history the reference can model, or ValueError naming what is wrong: one list of sites per
    outer synchronisation, each in site order and not empty; a site absent from a sync re-synchronises (takes the
    global state) at a sync's boundary after it and before it takes part again."""
    if variant != "diloco":
        raise ValueError(f"membership history: DiLoCo only, not {variant}")
    if len(members) != syncs:
        raise ValueError(f"membership history: {len(members)} outer steps given, the run has {syncs}")
    for k, m in enumerate(members):
        if not m or list(m) != sorted(set(m)) or not all(0 <= i < sites for i in m):
            raise ValueError(f"membership history: outer step {k}: {m} is not a non-empty list of sites in order")
    for done, i in resyncs:
        if not (every <= done and 0 <= i < sites):
            raise ValueError(f"membership history: re-synchronisation {(done, i)} is not (inner steps done >= H, "
                             f"a site)")
    away: set[int] = set()
    for k in range(syncs + 1):                  # the resyncs between outer step k-1 and outer step k
        back = [i for done, i in resyncs if k * every <= done < (k + 1) * every or (k == syncs and done >= k * every)]
        if len(back) != len(set(back)) or set(back) - away:
            raise ValueError(f"membership history: sites {sorted(back)} re-synchronise before outer step {k} "
                             f"without having left (or twice)")
        away -= set(back)
        if k == syncs:
            break
        if away & set(members[k]):
            raise ValueError(f"membership history: sites {sorted(away & set(members[k]))} take part in outer step "
                             f"{k} without re-synchronising first")
        away |= set(range(sites)) - set(members[k])


def reference(variant: str, sites: list[list[int]], count: int, steps: int, every: int, parts: int, seed: int,
              inner_lr: float, outer_lr: float, momentum: float, mix: float, bits: int,
              members: list[list[int]] | None = None, resyncs: list[tuple[int, int]] = ()) -> dict:
    """The run in numpy, sites in lockstep (a site's ranks hold the same parameters, so one copy per site):
    {"theta": [per site], "outer": the outer parameters}.

    DiLoCo with a membership history (PCCL's peers leaving and joining): `members[k]` are the sites whose
    pseudo-gradients outer step k averages (the ring runs over them alone, in site order); a site left out keeps
    its own parameters and goes on with its inner steps. `resyncs` are (inner steps done, site): after that many
    steps (and the outer step at that boundary) the site takes the global state, outer parameters and momentum,
    its parameters set to the outer ones and its error-feedback residual cleared, and takes part again in the
    next outer step. Without `members`, every site takes part in every outer step."""
    if members is not None:
        check_membership(variant, len(sites), steps // every, members, list(resyncs), every)
    s, goal = len(sites), target(count, seed)
    theta = [initial(count, seed) for _ in sites]
    outer, mom = initial(count, seed), np.zeros(count, F32)
    residual = [np.zeros(count, F32) for _ in sites]
    frag = fragments(count, parts if variant == "streaming" else 1)
    world = sum(map(len, sites))
    pending: list[tuple[int, np.ndarray]] = []

    def outer_step(p: int, deltas: list[np.ndarray], present: list[int]) -> np.ndarray:
        sl = frag[p]
        if bits:
            total = ordered_sum([with_feedback(d, residual[i][sl], bits) for i, d in zip(present, deltas)],
                                bits, sl.stop - sl.start)
        else:
            total = ring_sum(deltas)
        avg = total / F32(len(present))
        nesterov(outer[sl], mom[sl], avg, outer_lr, momentum)
        return avg

    for t in range(steps):
        sums = [sum_grads([gradient(theta[i], goal, seed, r, t) for r in ranks]) for i, ranks in enumerate(sites)]
        if variant == "ddp":
            total = sum_grads(sums)
            for i in range(s):
                inner_update(theta[i], total, inner_lr, world)
        else:
            for i, ranks in enumerate(sites):
                inner_update(theta[i], sums[i], inner_lr, len(ranks))
        everyone = list(range(s))
        for p, deltas in pending:                       # exchanged during this step, applied after it
            outer_step(p, deltas, everyone)
            for i in range(s):
                merge(theta[i][frag[p]], outer[frag[p]], mix)
        pending = []
        for p in launched(variant, t + 1, every, parts, steps):
            present = everyone if members is None else list(members[(t + 1) // every - 1])
            deltas = [outer[frag[p]] - theta[i][frag[p]] for i in present]
            if variant == "diloco":                     # blocking: applied at once
                outer_step(p, deltas, present)
                for i in present:
                    theta[i][:] = outer
            else:
                pending.append((p, deltas))
        for done, i in resyncs:                         # a site back: the global state, from a surviving site
            if done == t + 1:
                theta[i][:] = outer
                residual[i][:] = 0
    if variant == "ddp":
        outer = theta[0].copy()
    return {"theta": theta, "outer": outer, "momentum": mom, "loss": [loss(th, goal) for th in theta]}


def sum_grads(grads: list[np.ndarray]) -> np.ndarray:
    """Integer-valued, so exact in any order."""
    total = grads[0].copy()
    for g in grads[1:]:
        total += g
    return total
