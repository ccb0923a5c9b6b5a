"""The spec machinery (hosts/spec/base.py): every field type read back from JSON, and every way a document can
be wrong named by its key."""
import dataclasses
from typing import Any, Literal

import pytest

from hosts.spec import Spec, SpecError


@dataclasses.dataclass(frozen=True)
class Inner(Spec):
    a: int
    b: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Outer(Spec):
    n: int
    x: float = 1.5
    flag: bool = False
    mode: Literal["one", "two"] = "one"
    items: tuple[Inner, ...] = ()
    table: dict[str, float] | None = None
    free: dict[str, Any] | None = None
    inner: Inner | Literal[False] = Inner(a=0)


def test_round_trip_keeps_every_type():
    spec = Outer(n=3, x=2, flag=True, mode="two", items=(Inner(1), Inner(2, "b")), table={"k": 0.5},
                 free={"deep": [1, {"a": None}]}, inner=False)
    assert Outer.from_json(spec.to_json()) == spec
    assert Outer.from_dict({"n": 1}) == Outer(n=1)


def test_a_file_round_trip(tmp_path):
    path = str(tmp_path / "spec.json")
    Outer(n=2, items=(Inner(5),)).save(path)
    assert Outer.load(path) == Outer(n=2, items=(Inner(5),))


def test_lists_come_back_as_tuples_and_go_out_as_lists():
    spec = Outer.from_dict({"n": 1, "items": [{"a": 1}]})
    assert spec.items == (Inner(1),) and spec.to_dict()["items"] == [{"a": 1, "b": None}]


@pytest.mark.parametrize("doc,named", [
    ({"n": 1, "extra": 2}, "extra: unknown key in Outer"),
    ({}, "n: required key of Outer missing"),
    ({"n": "1"}, "n: expected int"),
    ({"n": True}, "n: expected int"),
    ({"n": 1.0}, "n: expected int"),
    ({"n": 1, "x": "2"}, "x: expected float"),
    ({"n": 1, "flag": 1}, "flag: expected bool"),
    ({"n": 1, "mode": "three"}, "mode: 'three' is not one of"),
    ({"n": 1, "items": {"a": 1}}, "items: expected a list"),
    ({"n": 1, "items": [{"a": 1}, {"a": "x"}]}, "items[1].a: expected int"),
    ({"n": 1, "items": [{"a": 1, "c": 0}]}, "items[0].c: unknown key in Inner"),
    ({"n": 1, "table": {"k": "v"}}, "table.k: expected float"),
    ({"n": 1, "inner": True}, "inner: bool True is none of Inner | false"),
    ({"n": 1, "inner": {"a": 1, "z": 2}}, "inner.z: unknown key in Inner"),
])
def test_wrong_documents_are_rejected_naming_the_key(doc, named):
    with pytest.raises(SpecError, match="^" + named.replace("[", r"\[").replace("]", r"\]").replace("|", r"\|")):
        Outer.from_dict(doc)


def test_not_json_and_not_an_object_are_rejected():
    with pytest.raises(SpecError, match="not JSON"):
        Outer.from_json("{")
    with pytest.raises(SpecError, match="expected an object"):
        Outer.from_json("[1]")


def test_specs_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Outer(n=1).n = 2
