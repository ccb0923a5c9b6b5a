"""The controller's state files: the one module that writes and reads them.

    STATE                    fabric_app: {"mode", "failover", "switches": installed routes per switch,
                             "down": [[switch, port]], "port_events", "errors"}
    STATE + ".mcast"         multicast_app: {"groups": {group: {"members", "trees", "unreachable"}},
                             "installed", "rules", "events", "errors", "removed_bytes": {switch: {key: bytes
                             deleted tree flows forwarded}}, "removed_pending", "group_hosts": {group: hosts}}

The apps write them atomically (a temporary file, then os.replace), so a reader never sees half a file;
the readers still take a missing or unparsable file as "nothing yet" (the controller has not written).
The testbed reads them through read_routing, multicast_groups, multicast_installed, installed_members and multicast_removed.
"""
from __future__ import annotations

import json
import os

MCAST_SUFFIX = ".mcast"


def multicast_path(state_path: str) -> str:
    """The multicast app's file, next to the routing state file `state_path`."""
    return state_path + MCAST_SUFFIX


def write(path: str, state: dict) -> None:
    """Replace `path` with `state` (JSON) atomically."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
    os.replace(tmp, path)


def _read(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_routing(state_path: str) -> dict:
    """fabric_app's state: installed switches, ports it saw down, route-update events ({} before any)."""
    return _read(state_path) or {}


def multicast_groups(state_path: str) -> dict:
    """The multicast app's view: group -> {members, trees (switch -> tree ports), unreachable} ({} before any)."""
    return (_read(multicast_path(state_path)) or {}).get("groups", {})


def multicast_installed(state_path: str) -> bool:
    """Whether every switch has acknowledged (barrier reply) the multicast rules of the current groups."""
    return bool((_read(multicast_path(state_path)) or {}).get("installed", False))


def installed_members(state_path: str) -> dict[str, list[str]]:
    """group -> its members, if every switch has acknowledged the rules of these very groups; else {}.
    One read, so the members and the acknowledgement belong to the same state."""
    view = _read(multicast_path(state_path)) or {}
    if not view.get("installed"):
        return {}
    return {group: g.get("members", []) for group, g in view.get("groups", {}).items()}


def multicast_removed(state_path: str) -> dict:
    """What the multicast trees' deleted flows forwarded: {"bytes": {switch: {key: bytes}}, "pending": deletions
    whose byte counts have not come back yet, "group_hosts": {group: every host that joined it}}."""
    view = _read(multicast_path(state_path)) or {}
    return {"bytes": view.get("removed_bytes", {}), "pending": view.get("removed_pending", 0),
            "group_hosts": view.get("group_hosts", {})}
