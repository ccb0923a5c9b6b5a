"""The fuzzer's kinds are interleaved, so every kind of junk meets the collective that runs beside it."""
from hosts.agents.fuzz import interleaved


def test_every_kind_spans_the_whole_run_in_its_own_order():
    frames = {kind: [(kind, k) for k in range(n)] for kind, n in {"joins": 2011, "lldp": 500, "roce": 7}.items()}
    order = interleaved(frames)
    assert sorted(order) == sorted(f for fs in frames.values() for f in fs)           # each frame once
    for kind, fs in frames.items():
        assert [f for f in order if f[0] == kind] == fs                               # a kind keeps its order
    tenth = len(order) // 10
    for part in range(10):
        kinds = {kind for kind, _ in order[part * tenth:(part + 1) * tenth]}
        assert {"joins", "lldp"} <= kinds, (part, kinds)                               # no kind bunched at one end
    positions = [i for i, f in enumerate(order) if f[0] == "roce"]
    gaps = [b - a for a, b in zip(positions, positions[1:])] + [len(order) - positions[-1]]
    assert max(gaps) <= 1.1 * len(order) / 7                                       # 7 frames, evenly spaced


def test_an_empty_kind_is_no_error():
    assert interleaved({"a": [], "b": [1, 2]}) == [1, 2]
