"""`testbed topo KIND ...`: a fabric's switches, hosts and links (no root needed), as text, JSON or a drawing."""
from __future__ import annotations

import json
import sys

from testbed.cli.errors import UsageError
from testbed.fabric import params, placement, sites, topo


def cmd_topo(args) -> int:
    given = params.given(args)
    fabric = topo.build_from(params.FabricParams(args.kind, **given))
    for key in params.ignored_params(fabric.kind, given):
        print(f"warning: --{key}: a {fabric.kind} fabric has no use for it; ignored", file=sys.stderr)
    if args.draw:
        from testbed.results import draw
        try:
            print(f"drawn: {draw.draw(fabric, args.draw)}")
        except draw.DrawError as exc:
            raise UsageError(str(exc)) from None
        except OSError as exc:
            raise UsageError(f"--draw {args.draw}: {exc.strerror}") from None
    spread = None
    if args.machines is not None:
        try:
            spread = placement.place(fabric, args.machines.split(","))
        except placement.PlacementError as exc:
            raise UsageError(f"--machines: {exc}") from None
    if args.json:
        print(json.dumps(fabric.to_json() | ({"placement": spread.to_json(fabric)} if spread else {})))
        return 0
    for line in fabric.params.time_scaling():
        print(line)
    c = fabric.counts()
    print(f"{fabric.kind}: {c['servers']} servers x {c['gpus_per_server']} GPUs, "
          f"{c['switches']} switches, {c['hosts']} hosts, {c['links']} links")
    for sw in fabric.switches.values():
        ports = [l for l in fabric.links if sw.name in (l.a, l.b)]
        print(f"  {sw.name:<8} {sw.kind:<8} {len(ports):>3} ports")
    for line in sites.describe(fabric):
        print(line)
    if spread:
        print(f"placed by rails on {len(spread.machines)} machines:")
        print("\n".join(spread.describe(fabric)))
    return 0


def register(subparsers) -> None:
    t = subparsers.add_parser("topo", help="print a fabric's switches, hosts and links (no root needed)")
    params.add_flags(t)
    t.add_argument("--machines", metavar="NAME,NAME,...",
                   help="also show how the fabric is spread over these machines (placement by rails)")
    t.add_argument("--json", action="store_true")
    t.add_argument("--draw", metavar="FILE", help="also draw the fabric into FILE (.svg, .png or .pdf)")
    t.set_defaults(func=cmd_topo)
