"""Start the fabric controller under os-ken, listening on loopback only.

    python -m controllers.run --topology TOPO.json --mode ecmp --port 6653 --state STATE.json

(os-ken from PyPI has no `osken-manager`; this is its AppManager.run_apps, as the manager does.)
"""
from __future__ import annotations

import argparse

from controllers import settings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topology", required=True)
    ap.add_argument("--mode", default="ecmp")
    ap.add_argument("--port", type=int, default=6653)
    ap.add_argument("--state", required=True)
    ap.add_argument("--failover", action="store_true", help="data-plane fast failover (watch ports)")
    ap.add_argument("--delay-ms", type=float, default=0.0,
                    help="act on a port change this long after hearing of it (a remote, busy controller)")
    ap.add_argument("--route-groups", action="store_true",
                    help="a group of its own for every multi-path route, whose buckets count each port's bytes")
    args = ap.parse_args()
    settings.export(args.topology, args.mode, args.state, args.failover, args.delay_ms, args.route_groups)

    import functools

    import eventlet
    from os_ken import cfg, log
    from os_ken.base import app_manager  # before os_ken.controller.controller, which needs its options
    from os_ken.lib import hub
    # eventlet listens with SO_REUSEPORT by default: a second controller on the same port would share the
    # switches' connections with the first, silently. Without it, a port already taken fails at once.
    hub.listen = functools.partial(eventlet.listen, reuse_port=False)
    cfg.CONF(["--ofp-listen-host", "127.0.0.1", "--ofp-tcp-listen-port", str(args.port)],
             project="os_ken", default_config_files=[])
    log.init_log()
    app_manager.AppManager.run_apps(["controllers.fabric_app", "controllers.multicast_app"])


if __name__ == "__main__":
    main()
