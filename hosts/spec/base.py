"""What every spec between the testbed and its host programs is: a frozen dataclass that writes itself as JSON
and reads itself back, checking each key against its field's type.

The field types are the whole contract: int, float (an int is a float too), str, bool, Literal[...] of strings,
X | None, tuple[X, ...] (a JSON list), dict[str, X], Any (any JSON value) and other specs (a JSON object).
A key the class does not declare, a value of another type or a required key left out is a SpecError naming
the key by its path (`peers[2].ip`). Defaults live on the fields, nowhere else.
"""
from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any, Literal


class SpecError(ValueError):
    """A spec's JSON that does not fit its class; the message names the key."""


@dataclasses.dataclass(frozen=True)
class Spec:
    """Base class of the specs: to_json / from_json (and their dict forms)."""

    def to_dict(self) -> dict:
        """The JSON object: every field, tuples as lists, nested specs as objects."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, doc: Any, where: str = ""):
        if not isinstance(doc, dict):
            raise SpecError(f"{where or cls.__name__}: expected an object, got {_kind(doc)}")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(doc) - set(fields))
        if unknown:
            raise SpecError(f"{_join(where, unknown[0])}: unknown key in {cls.__name__} "
                            f"(known: {', '.join(sorted(fields))})")
        hints = _hints(cls)
        values = {}
        for name, f in fields.items():
            if name in doc:
                values[name] = _convert(hints[name], doc[name], _join(where, name))
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise SpecError(f"{_join(where, name)}: required key of {cls.__name__} missing")
        return cls(**values)

    @classmethod
    def from_json(cls, text: str | bytes):
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise SpecError(f"{cls.__name__}: not JSON: {exc}") from None
        return cls.from_dict(doc)

    @classmethod
    def load(cls, path: str):
        """The spec in a file (what the rank programs are given)."""
        with open(path) as f:
            return cls.from_json(f.read())

    def save(self, path: str) -> None:
        with open(path, "w") as f:
            f.write(self.to_json())


def _plain(value: Any) -> Any:
    if isinstance(value, Spec):
        return value.to_dict()
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


_HINTS: dict[type, dict] = {}


def _hints(cls: type) -> dict:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _convert(hint: Any, value: Any, where: str) -> Any:
    """value (parsed JSON) as the field type `hint` wants it, or SpecError naming `where`."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for option in (a for a in args if a is not type(None)):
            try:
                return _convert(option, value, where)
            except SpecError as exc:
                errors.append((option, exc))
        # an object for a spec option, or the only option: that option's own error names the inner key
        fits = [e for o, e in errors if len(errors) == 1 or isinstance(value, dict) and _is_spec(o)]
        if len(fits) == 1:
            raise fits[0]
        raise SpecError(f"{where}: {_kind(value)} {value!r} is none of {' | '.join(map(_name, args))}")
    if origin is Literal:
        if not any(value == a and type(value) is type(a) for a in args):
            raise SpecError(f"{where}: {value!r} is not one of {', '.join(map(repr, args))}")
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise SpecError(f"{where}: expected a list, got {_kind(value)}")
        return tuple(_convert(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise SpecError(f"{where}: expected an object, got {_kind(value)}")
        item = args[1] if args else Any
        return {k: _convert(item, v, _join(where, k)) for k, v in value.items()}
    if _is_spec(hint):
        return hint.from_dict(value, where)
    return _scalar(hint, value, where)


def _scalar(hint: type, value: Any, where: str) -> Any:
    # bool is an int to Python, never to a spec; an int is a fine float (JSON writes 60.0 as 60 often enough)
    ok = {bool: isinstance(value, bool),
          int: isinstance(value, int) and not isinstance(value, bool),
          float: isinstance(value, (int, float)) and not isinstance(value, bool),
          str: isinstance(value, str)}.get(hint)
    if ok is None:
        raise TypeError(f"{where}: a spec field cannot be of type {hint!r}")
    if not ok:
        raise SpecError(f"{where}: expected {_name(hint)}, got {_kind(value)} {value!r}")
    return value


def _is_spec(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, Spec)


def _name(hint: Any) -> str:
    if typing.get_origin(hint) is Literal:
        return " | ".join(json.dumps(a) for a in typing.get_args(hint))
    return "null" if hint is type(None) else getattr(hint, "__name__", str(hint))
