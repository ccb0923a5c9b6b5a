"""`testbed status [--json]`: the fabric up on this machine (since when, from what, hosts, switches, links with
their state and rate) and what runs left behind."""
from __future__ import annotations

import json
import time

from testbed.cli.live import LiveFabric, leftovers
from testbed.fabric.links import fabric_tag


def register(subparsers) -> None:
    p = subparsers.add_parser("status", help="what fabric is up: hosts, switches, links, leftovers")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)


def cmd_status(args) -> int:
    from testbed.fabric import runstate
    fabrics = runstate.live_fabrics()          # read once: this tag's fabric and the others
    found = fabrics.pop(fabric_tag(), None)
    others = {tag: state for tag, (_, state) in fabrics.items()}
    report = {"up": found is not None, "leftovers": leftovers(),
              "other_tags": [{"tag": tag, "pid": st.get("owner_pid"), "kind": st["fabric"].get("kind")}
                             for tag, st in sorted(others.items())]}
    if found:
        report.update(describe(LiveFabric(*found)))
    print(json.dumps(report, indent=2) if args.json else "\n".join(text(report)))
    return 0


def describe(live: LiveFabric) -> dict:
    fab, state = live.fabric, live.state
    info = state.get("live", {})
    return {"pid": live.owner_pid, "by": "testbed up" if info else "testbed run", "since": info.get("since"),
            "source": info.get("source"), "routing": info.get("routing"), "host_backend": state.get("hosts"),
            "fabric": fab.counts() | {"nic_mbps": fab.params.nic_mbps, "hb_mbps": fab.params.hb_mbps},
            "controller_pid": state.get("controller_pid"),
            "hosts": [{"name": h.name, "kind": h.kind, "ip": h.ip, "hb_ip": h.hb_ip,
                       "pid": state.get("host_pids", {}).get(h.name)} for h in fab.hosts.values()],
            "switches": [{"name": s.name, "kind": s.kind, "sdn": s.sdn,
                          "ports": sum(1 for l in fab.links if s.name in (l.a, l.b))} for s in fab.switches.values()],
            "links": live.links()}


def text(r: dict) -> list[str]:
    lines = []
    if r["up"]:
        f = r["fabric"]
        since = (time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["since"])) +
                 f" ({_age(time.time() - r['since'])} ago)") if r["since"] else "unknown"
        source = f", from {r['source']}" if r["source"] else ""
        lines += [f"fabric up since {since}, {r['by']} pid {r['pid']}{source}",
                  f"  {f['kind']}: {f['servers']} servers x {f['gpus_per_server']} GPUs, NIC {f['nic_mbps']:g} Mb/s, "
                  f"HB {f['hb_mbps']:g} Mb/s, routing {r['routing'] or '?'}, hosts {r['host_backend']}, "
                  f"controller pid {r['controller_pid']}",
                  f"hosts ({len(r['hosts'])}):"]
        lines += [f"  {h['name']:<12} {h['kind']:<6} {h['ip']:<14} {('hb ' + h['hb_ip']) if h['hb_ip'] else '':<17} "
                  f"pid {h['pid']}" for h in r["hosts"]]
        lines.append(f"switches ({len(r['switches'])}):")
        lines += [f"  {s['name']:<12} {s['kind']:<9} {'OVS (SDN)' if s['sdn'] else 'Linux bridge':<13} "
                  f"{s['ports']} ports" for s in r["switches"]]
        down = sum(1 for l in r["links"] if l["state"] != "up")
        lines.append(f"links ({len(r['links'])}, {down} down):")
        lines += [f"  {l['ends'][0]:<16} {l['ends'][1]:<16} {l['kind']:<9} {l['mbps']:>8g} Mb/s "
                  f"{'shaped' if l['shaped'] else 'patch':<7} {l['state']}{' (standby)' if l['standby'] else ''}"
                  for l in r["links"]]
    else:
        lines.append("no fabric is up (testbed up SCENARIO | --topo KIND,... brings one up)")
    for other in r.get("other_tags", []):
        tag = other["tag"] or "(none)"
        lines.append(f"also up under fabric tag {tag}: {other['kind']}, pid {other['pid']} "
                     f"(TESTBED_FABRIC_TAG={other['tag']} testbed status)")
    left = r["leftovers"]
    lines.append("leftovers: " + ("; ".join(f"{len(v)} {k} ({', '.join(v[:4])}{', ...' if len(v) > 4 else ''})"
                                            for k, v in left.items()) + " — `testbed clean` removes them"
                                  if left else "none"))
    return lines


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
