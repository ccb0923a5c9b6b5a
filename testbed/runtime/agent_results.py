"""The line a host program printed, checked against its program's result schema (hosts/spec/results.py)
before the testbed reads a figure of it: a program and a testbed that disagree on a key fail naming it."""
from __future__ import annotations

import jsonschema

from hosts.spec.results import RESULTS

_validators: dict[str, jsonschema.Draft7Validator] = {}


def problem(program: str, doc) -> str | None:
    """What is wrong with `doc` as `program`'s result, naming the key; None if it fits (or the program has
    no schema: a user's program)."""
    schema = RESULTS.get(program)
    if schema is None:
        return None
    if program not in _validators:
        _validators[program] = jsonschema.Draft7Validator(schema)
    err = jsonschema.exceptions.best_match(_validators[program].iter_errors(doc))
    if err is None:
        return None
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path).lstrip(".")
    return f"{where or 'the result'}: {err.message}"
