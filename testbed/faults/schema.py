"""The scenario schema's `faults:` item, generated from the fault kinds: their names, what each breaks and
what its target names, and the keys a kind adds (link-flap's `count`)."""
from __future__ import annotations


def _grouped(pairs) -> list[tuple[list[str], str]]:
    """[(names, phrase)] in the order each phrase first appears: kinds that share a phrase share a clause."""
    out: dict[str, list[str]] = {}
    for name, phrase in pairs:
        out.setdefault(phrase, []).append(name)
    return [(names, phrase) for phrase, names in out.items()]


def fault_schema(kinds) -> dict:
    what = "; ".join(f"{', '.join(names)}: {doc}" for names, doc in _grouped((k.name, k.doc) for k in kinds))
    targets = "; ".join(target.phrase.format(kinds=" and ".join(names))
                        for names, target in _grouped((k.name, k.target) for k in kinds))
    extra = {key: value for k in kinds for key, value in k.properties.items()}
    return {"type": "object", "additionalProperties": False, "required": ["at", "kind", "target"],
            "description": "One failure, injected while the workloads run.",
            "properties": {
                "at": {"type": "number", "minimum": 0,
                       "description": "When, in seconds after the workloads start (or after `workload` starts)."},
                "kind": {"enum": [k.name for k in kinds], "description": f"What fails. {what}."},
                "target": {"type": "string", "description": f"{targets}."},
                "workload": {"type": "string", "description": "The name of the workload whose start `at` counts "
                             "from. Default: none (`at` counts from the start of the first workload)."},
                "duration": {"type": "number", "exclusiveMinimum": 0,
                             "description": "Seconds until it is mended (cable restored, GPU resumed); link-flap: "
                             "each way. Default: never mended (link-flap: 0.5)."},
                **extra}}
