"""The user-space path of link delay, for kernels without netem: tc diverts a link end's outgoing frames
through a rate limiter into the delay process (delayd.py), which sends them on from the same end once due.

One direction of a link, leaving end E (a veth end, in a host's namespace or the root namespace):

    E's clsact egress: frames without the delay's mark --mirred--> helper H --veth--> H' --AF_PACKET--> delayd
    delayd, when due: AF_PACKET send on E with the mark --> E's egress (let through) --> the wire --> peer

- The rate limiter (tbf) of E sits on H: rate first, then delay, as on a real link. A sender's frames wait
  in that queue on its socket's account, so a sender that outruns its link blocks rather than loses them.
  E's own root qdisc is left empty while the delay is on, and put back afterwards.
- The divert is a classic-BPF cls_bpf filter (tc's `bytecode`: no compiler) reading the mark, and mirred; no
  netem, gact or matchall needed.
- Frames leave E after their delay, so packet captures and counters on either end see each frame once,
  at the time it is on the wire, not at the time its sender wrote it.

Pure command lines here, and the helpers' names; delay.py runs them and talks to the process. A command
starting with "-" may fail (what it removes may not be there).
"""
from __future__ import annotations

from testbed import PREFIX
from testbed.fabric.delayd import MARK
from testbed.fabric.links import fabric_tag, tbf

SKF_AD_MARK = 0xfffff000 + 20           # classic BPF's ancillary load of skb->mark
# not our mark: match (-1: run the action); ours: no match (0: the frame goes on)
DIVERT_BPF = f"4,32 0 0 {SKF_AD_MARK},21 1 0 {MARK},6 0 0 4294967295,6 0 0 0"
PREF = 49                               # the divert filter's preference on the end's egress
HELPER_MTU = 65535                      # any frame the end sends, GSO ones too, fits
KEY_MAX = 7                             # tb- + tag + dl + key + side + p fits IFNAMSIZ (15)


def helpers(key: str, side: str) -> tuple[str, str]:
    """The helper veth pair of one direction: H (the divert's target) and H' (the delay process reads it).
    side is the sending end, "a" or "b"."""
    h = f"{PREFIX}{fabric_tag()}dl{key}{side}"
    return h, h + "p"


def setup(end: str, key: str, side: str, mbps: float | None, mtu: int) -> list[str]:
    """Helpers and rate limiter, before the delay process binds H'; the divert comes after (divert)."""
    h, hp = helpers(key, side)
    cmds = [f"ip link add {h} mtu {HELPER_MTU} type veth peer name {hp} mtu {HELPER_MTU}"]
    for dev in (h, hp):     # no IPv6 link-local address: H must send nothing of its own into the link
        cmds += [f"ip link set {dev} addrgenmode none", f"ip link set {dev} up"]
    if mbps:
        cmds += [tbf(h, mbps, mtu), f"-tc qdisc del dev {end} root"]     # "-": it may have none
    return cmds


def divert(end: str, key: str, side: str, make_clsact: bool) -> list[str]:
    h, _ = helpers(key, side)
    return ([f"tc qdisc add dev {end} clsact"] if make_clsact else []) + [
        f"tc filter add dev {end} egress pref {PREF} bpf bytecode '{DIVERT_BPF}' action mirred egress redirect "
        f"dev {h}"]


def undivert(end: str, mbps: float | None, mtu: int) -> list[str]:
    """The end's rate back on the end, then frames straight to the wire again (the held ones follow)."""
    return ([tbf(end, mbps, mtu)] if mbps else []) + [f"-tc filter del dev {end} egress pref {PREF}"]


def teardown(end: str, key: str, side: str, made_clsact: bool) -> list[str]:
    h, _ = helpers(key, side)
    return ([f"-tc qdisc del dev {end} clsact"] if made_clsact else []) + [f"-ip link del {h}"]


PROBE = ["ip link add tb-probe0 type veth peer name tb-probe1",
         "tc qdisc add dev tb-probe0 clsact",
         f"tc filter add dev tb-probe0 egress pref {PREF} bpf bytecode '{DIVERT_BPF}' action mirred egress "
         f"redirect dev tb-probe1"]
