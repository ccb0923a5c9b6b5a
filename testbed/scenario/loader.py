"""Scenario files: YAML, validated against a JSON schema, with `--set key=value` overrides.

Errors are ScenarioError with one line that names the problem and where it is: FILE:LINE:COLUMN, the key's
path, and for an unknown key or value the closest allowed one. Every key carries a description and its
default, so `testbed schema` serves editors and docs/scenario-reference.md is generated from it.
"""
from __future__ import annotations

import copy
import difflib
import re

import jsonschema
import yaml

from testbed import __version__
from testbed.fabric import params as fabric_params
from testbed.fabric.placement import MACHINE_NAME
from testbed.faults import SCHEMA as FAULT       # generated from the fault kinds
from testbed.scenario.marks import Marks, parse
from testbed.scenario.schema import RATE, SIZE, ScenarioError, parse_size
from testbed.workloads import REGISTRY

FABRIC = fabric_params.scenario_schema()

CAPTURE = {"type": "object", "additionalProperties": False, "required": ["point"],
           "description": "One packet capture (tcpdump), written to the results' pcaps/.",
           "properties": {
               "point": {"type": "string", "description": "Where: HOST/nic, HOST/hb or SWITCH:PORT."},
               "filter": {"type": "string", "default": "",
                          "description": "A tcpdump filter, e.g. 'udp port 4791' (RoCEv2)."},
               "snaplen": {"type": "integer", "minimum": 64, "maximum": 262144, "default": 262144,
                           "description": "Bytes kept of each packet; below the frame size it cuts RoCEv2 ICRCs."},
               "max_packets": {"type": "integer", "minimum": 1, "default": 1000000,
                               "description": "tcpdump stops after this many packets."}}}
ROUTING_MODES = ["single", "ecmp", "spray", "split:2", "split:4", "rr"]

# host_image: a flavour of the host image, or an image reference NAME:TAG (with an optional registry path)
HOST_IMAGE = re.compile(r"^(default|torch|tf|[a-z0-9][a-z0-9._/-]*:[A-Za-z0-9._-]+)$")

SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["name", "fabric", "workloads"],
    "description": "A testbed scenario: a fabric, the workloads run on it, faults injected and packets captured.",
    "properties": {
        "name": {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
                 "description": "The experiment's name (letters, digits, '_', '.', '-'); results go to "
                 "results/NAME/TIMESTAMP."},
        "description": {"type": "string", "description": "What the experiment shows, in a line. Default: none."},
        "fabric": FABRIC,
        "routing": {"type": "object", "additionalProperties": False, "default": {},
                    "description": "How the controller routes.",
                    "properties": {"mode": {"type": "string", "default": "ecmp", "examples": ROUTING_MODES,
                                            "description": "single (one shortest path), ecmp (hash over equal-cost "
                                            "paths), spray (a new UDP source port per packet), split:K (K sub-flows "
                                            "per message, K from 2 to 16) or rr (exact round robin by the "
                                            "controller)."},
                                   "failover": {"type": "boolean", "default": True,
                                                "description": "Data-plane fast failover: a cut link's traffic moves "
                                                "at once, before the controller recomputes routes."},
                                   # the controller acts on a port change this long after hearing of it
                                   "controller_delay_ms": {"type": "number", "minimum": 0, "maximum": 10000,
                                                           "default": 0,
                                                           "description": "The controller acts on a port change "
                                                           "this many ms after hearing of it (a remote, busy "
                                                           "controller)."}}},
        "workloads": {"type": "array", "minItems": 1,
                      "description": "What runs on the fabric, one after the other; each item's `type` decides "
                      "its other keys.",
                      "items": {
                          "type": "object", "required": ["type"],
                          "properties": {"type": {"enum": list(REGISTRY), "description": "The workload type."}},
                          "allOf": [{"if": {"required": ["type"], "properties": {"type": {"const": t}}}, "then": w.SCHEMA}
                                    for t, w in REGISTRY.items()]}},
        "faults": {"type": "array", "items": FAULT, "default": [],
                   "description": "Failures injected while the workloads run."},
        "capture": {"type": "array", "items": CAPTURE, "default": [],
                    "description": "Packet captures taken while the workloads run."},
        "hosts": {"enum": ["netns", "docker"], "default": "netns",
                  "description": "Emulated hosts: network namespaces (netns) or Docker containers (docker)."},
        "machines": {"type": "array", "minItems": 1, "maxItems": 64, "default": [],
                     "description": "Spread the fabric over these machines by rails (docs/machines.md): each runs "
                     "its own Open vSwitch and is reached over ssh; the controller and the run stay here. Default: "
                     "none, everything on this machine.",
                     "items": {"type": "object", "additionalProperties": False, "required": ["name", "address"],
                               "properties": {
                                   "name": {"type": "string", "pattern": MACHINE_NAME.pattern,
                                            "description": "The machine's name in placement and results."},
                                   "address": {"type": "string", "minLength": 1,
                                               "description": "Where ssh reaches it; also the VXLAN tunnels' "
                                               "underlay address."},
                                   "ssh_user": {"type": "string", "default": "root",
                                                "description": "The ssh user (root, or one with sudo -n)."},
                                   "ssh_options": {"type": "array", "items": {"type": "string"}, "default": [],
                                                   "description": "Extra ssh options, e.g. [-i, KEY, -p, '2222']."},
                                   "pythonpath": {"type": "string", "default": "/opt/testbed",
                                                  "description": "Where the machine has the `hosts` package."},
                                   "python": {"type": "string", "default": "python3",
                                              "description": "The machine's interpreter (with numpy)."}}}},
        "host_image": {"type": "string", "default": "default", "pattern": HOST_IMAGE.pattern,
                       "examples": ["default", "torch", "tf", "tb-mine:latest"],
                       "description": "The Docker hosts' image (with hosts: docker only): default (Python, numpy, "
                       "Open MPI, mpi4py, ssh; with an offload workload, tf), torch (that and Debian's "
                       "python3-torch 1.13 with gloo; +1 GB, built on first use), tf (that and tensorflow-cpu "
                       "from PyPI, pinned as requirements-tf.txt; built on first use) or NAME:TAG, an image of "
                       "yours built FROM tb-host:latest (docs/docker.md)."},
        "host_limits": {"type": "object", "additionalProperties": False, "default": {},
                        "description": "CPU and memory limits of each Docker host (with hosts: docker only).",
                        "properties": {"cpus": {"type": "number", "exclusiveMinimum": 0, "maximum": 64, "default": 1,
                                                "description": "CPU cores of each container."},
                                       "memory": {**SIZE, "default": "1GiB",
                                                  "description": "Memory of each container, 32MiB to 64GiB."}}},
    },
}
MIN_HOST_MEMORY, MAX_HOST_MEMORY = 32 * 2**20, 64 * 2**30


VALIDATOR = jsonschema.Draft7Validator(SCHEMA)
NOT_A_MAPPING = "a scenario must be a YAML mapping with name, fabric and workloads"


def export() -> dict:
    """The scenario schema as a JSON Schema document (`testbed schema`): for editors' YAML plugins and docs."""
    return {"$schema": "http://json-schema.org/draft-07/schema#", "$id": f"urn:testbed:scenario:{__version__}",
            "title": "testbed scenario", **SCHEMA}


def _close(word, choices) -> str | None:
    found = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1)
    return found[0] if found else None


def _explain(err: jsonschema.ValidationError) -> list[ScenarioError]:
    """One error per offending key or value, naming where it is, with a suggestion for an unknown key or value."""
    path = tuple(err.absolute_path)
    where = ".".join(str(p) for p in path) or "top level"
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        allowed = list(err.schema.get("properties", {}))
        return [ScenarioError(f"{where}: Additional properties are not allowed ({k!r} was unexpected)"
                              + (f"; did you mean {close!r}?" if (close := _close(k, allowed))
                                 else f"; the keys here are {', '.join(allowed)}"), path, key=k)
                for k in err.instance if k not in allowed]
    close = _close(err.instance, err.validator_value) if err.validator == "enum" and isinstance(err.instance, str) \
        else None
    return [ScenarioError(f"{where}: {err.message}" + (f"; did you mean {close!r}?" if close else ""), path)]


def problems(doc) -> list[ScenarioError]:
    """Every place the document breaks the schema (not the checks beyond it: see validate())."""
    if not isinstance(doc, dict):
        return [ScenarioError(NOT_A_MAPPING)]
    # best_match of each error alone descends into anyOf to the branch the value most likely meant
    return [e for err in VALIDATOR.iter_errors(doc) for e in _explain(jsonschema.exceptions.best_match([err]))]


def validate(doc) -> dict:
    if not isinstance(doc, dict):
        raise ScenarioError(NOT_A_MAPPING)
    err = jsonschema.exceptions.best_match(VALIDATOR.iter_errors(doc))
    if err is not None:
        raise _explain(err)[0]
    mode = doc.get("routing", {}).get("mode", "ecmp")
    if mode not in ("single", "ecmp", "spray", "rr") and not re.fullmatch(r"split:([2-9]|1[0-6])", mode):
        raise ScenarioError(f"routing.mode: {mode!r} is not a routing mode; choose single, ecmp, spray, rr "
                            f"or split:K with K from 2 to 16")
    for i, w in enumerate(doc["workloads"]):
        for key in ("size", "sizes", "sweep"):
            values = w.get(key)
            values = values if isinstance(values, list) else list(values.values())[:2] \
                if isinstance(values, dict) else [values]
            for v in values:
                if v is None:
                    continue
                try:
                    parse_size(v)
                except ScenarioError as exc:
                    raise ScenarioError(f"workloads.{i}.{key}: {exc}") from None
        if w.get("pattern") == "pairs" and "pairs" not in w:
            raise ScenarioError(f"workloads.{i}: pattern 'pairs' needs a 'pairs' list")
    if doc.get("machines") and doc.get("hosts", "netns") != "netns":
        raise ScenarioError("machines: a fabric spread over machines runs namespace hosts; drop hosts: docker")
    if doc.get("machines"):
        doc.setdefault("fabric", {}).setdefault("hb_mtu", fabric_params.MACHINES_HB_MTU)
    names = [m.get("name") for m in doc.get("machines", [])]
    if len(set(names)) != len(names):
        raise ScenarioError(f"machines: a name is listed twice ({', '.join(sorted({n for n in names if names.count(n) > 1}))})")
    if doc.get("host_image", "default") != "default" and doc.get("hosts", "netns") != "docker":
        raise ScenarioError("host_image: the image of Docker hosts; set hosts: docker")
    if "host_limits" in doc:
        if doc.get("hosts", "netns") != "docker":
            raise ScenarioError("host_limits: CPU and memory limits are for Docker hosts; set hosts: docker")
        if "memory" in doc["host_limits"]:
            try:
                parse_size(doc["host_limits"]["memory"], MIN_HOST_MEMORY, MAX_HOST_MEMORY)
            except ScenarioError as exc:
                raise ScenarioError(f"host_limits.memory: {exc}") from None
    return doc


# The image Docker hosts take by default when a scenario runs a workload that needs more than the host image.
IMAGE_OF_WORKLOAD = {"offload": "tf"}


def host_limits(doc: dict) -> dict:
    """What a Docker-hosts scenario asks of each host, as the backend takes it: {cpus, memory (bytes), image}."""
    limits = dict(doc.get("host_limits", {}))
    if "memory" in limits:
        limits["memory"] = parse_size(limits["memory"], MIN_HOST_MEMORY, MAX_HOST_MEMORY)
    items = [x for w in doc.get("workloads", []) for x in [w, *(w.get("jobs") or [])]]   # a concurrent one's jobs
    needed = [IMAGE_OF_WORKLOAD[w["type"]] for w in items if isinstance(w, dict) and w.get("type") in IMAGE_OF_WORKLOAD]
    if doc.get("host_image", "default") != "default":
        limits["image"] = doc["host_image"]
    elif needed:
        limits["image"] = needed[0]
    return limits


def apply_set(doc: dict, assignment: str) -> None:
    """Apply one `key.sub=value` override; list items are addressed by index (workloads.0.size)."""
    if "=" not in assignment:
        raise ScenarioError(f"--set {assignment!r}: expected key=value")
    path, raw = assignment.split("=", 1)
    keys = path.strip().split(".")
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        value = raw
    node = doc
    for key in keys[:-1]:
        if isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        elif isinstance(node, dict):
            node = node.setdefault(key, {})
        else:
            raise ScenarioError(f"--set {path}: no such key {key!r}")
    last = keys[-1]
    if isinstance(node, list) and last.isdigit() and int(last) < len(node):
        node[int(last)] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise ScenarioError(f"--set {path}: no such key {last!r}")


def read(path: str, overrides: list[str] = ()) -> tuple[object, Marks]:
    """The file's document with the overrides applied, and where each of its keys is; ScenarioError naming
    the file (and line) if it cannot be read as one YAML document."""
    try:
        with open(path, "rb") as f:
            doc, root = parse(f.read().decode("utf-8"))
    except OSError as exc:
        raise ScenarioError(f"{path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{path}: not a text file (byte {exc.start} is not UTF-8): a scenario is YAML") from None
    except yaml.reader.ReaderError as exc:        # decodes, but holds control characters (NUL, ...)
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        raise ScenarioError(f"{path}: not a text file (control character #x{code:04x} at character {exc.position}): "
                            f"a scenario is YAML") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else path
        problem = getattr(exc, "problem", None) or "not one YAML document"
        raise ScenarioError(f"{where}: malformed YAML: {problem}") from None
    except ValueError as exc:                     # a value YAML resolves but cannot build: a date like 2024-13-45
        raise ScenarioError(f"{path}: malformed YAML: {exc}") from None
    marks = Marks(path, root)
    marks.duplicate_keys()
    doc = copy.deepcopy(doc)                      # YAML aliases share objects: an override must change one place
    for assignment in overrides:
        if not isinstance(doc, dict):
            break
        apply_set(doc, assignment)
        marks.overridden.append((tuple(assignment.split("=", 1)[0].strip().split(".")), assignment))
    return doc, marks


def load(path: str, overrides: list[str] = ()) -> dict:
    """The validated scenario; ScenarioError 'FILE:LINE:COLUMN: where: problem' (one line) otherwise."""
    doc, marks = read(path, overrides)
    try:
        return validate(doc)
    except ScenarioError as exc:
        raise marks.located(exc) from None
