"""The user-space path of link delay, for kernels without netem: tc diverts a link end's outgoing frames
through a rate limiter into the delay process (delayd.py), which sends them on from the same end once due.

One direction of a link, leaving end E (a veth end, in a host's namespace or the root namespace):

    E's clsact egress: frames without the delay's mark --mirred--> helper H --veth--> H' --AF_PACKET--> delayd
    delayd, when due: AF_PACKET send on E with the mark --> E's egress (let through) --> the wire --> peer

- The rate limiter (tbf) of E sits on H: rate first, then delay, as on a real link. A sender's frames wait
  in that queue on its socket's account, so a sender that outruns its link blocks rather than loses them.
  E's own root qdisc is left empty while the delay is on, and put back afterwards.
- The divert is a tc BPF program (nine instructions, assembled here: no compiler) that redirects every frame
  without the mark. It moves the frame itself, where mirred would send a copy: the copy belongs to no socket,
  and the sender would never block.
- Frames leave E after their delay, so packet captures and counters on either end see each frame once,
  at the time it is on the wire, not at the time its sender wrote it.

Command lines, the helpers' names and the divert program here; delay.py runs them and talks to the process.
A command starting with "-" may fail (what it removes may not be there).
"""
from __future__ import annotations

import os
import struct

from pyroute2 import IPRoute

from testbed import PREFIX
from testbed.fabric.delayd import MARK
from testbed.fabric.linuxcalls import bpf_load, netns
from testbed.fabric.links import beats_first, fabric_tag, tbf

PREF = 49                               # the divert filter's preference on the end's egress
CLSACT_EGRESS = 0xFFFFFFF3
SKB_MARK = 8                            # offsetof(struct __sk_buff, mark)
BPF_FUNC_REDIRECT = 23
HELPER_MTU = 65535                      # any frame the end sends, GSO ones too, fits
KEY_MAX = 7                             # tb- + tag + dl + key + side + p fits IFNAMSIZ (15)


def helpers(key: str, side: str) -> tuple[str, str]:
    """The helper veth pair of one direction: H (the divert's target) and H' (the delay process reads it).
    side is the sending end, "a" or "b"."""
    h = f"{PREFIX}{fabric_tag()}dl{key}{side}"
    return h, h + "p"


def setup(end: str, key: str, side: str, mbps: float | None, mtu: int, queue: int | None = None) -> list[str]:
    """Helpers and rate limiter, before the delay process binds H'; the divert comes after (divert)."""
    h, hp = helpers(key, side)
    cmds = [f"ip link add {h} mtu {HELPER_MTU} type veth peer name {hp} mtu {HELPER_MTU}"]
    for dev in (h, hp):     # no IPv6 link-local address: H must send nothing of its own into the link
        cmds += [f"ip link set {dev} addrgenmode none", f"ip link set {dev} up"]
    if mbps:
        cmds += [tbf(h, mbps, mtu, queue), *beats_first(h, mbps, mtu, queue),
                 f"-tc qdisc del dev {end} root"]     # "-": it may have none
    return cmds


def insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, dst | src << 4, off, imm)


def divert_program(helper_ifindex: int) -> bytes:
    """tc direct action: frames with the delay's mark go on (TC_ACT_OK) without it, the rest to the helper's
    egress."""
    return b"".join([
        insn(0x61, dst=2, src=1, off=SKB_MARK),         # r2 = skb->mark
        insn(0x15, dst=2, off=4, imm=MARK),             # if r2 == MARK: goto ok
        insn(0xb7, dst=1, imm=helper_ifindex),          # r1 = helper
        insn(0xb7, dst=2, imm=0),                       # r2 = 0: to its egress
        insn(0x85, imm=BPF_FUNC_REDIRECT),              # r0 = bpf_redirect(r1, r2): TC_ACT_REDIRECT
        insn(0x95),                                     # return r0
        insn(0x62, dst=1, off=SKB_MARK, imm=0),         # ok: skb->mark = 0, so that no other divert sees it
        insn(0xb7, dst=0, imm=0),                       # r0 = TC_ACT_OK
        insn(0x95)])                                    # return r0


def attach_divert(end: str, helper: str, netns_path: str | None) -> None:
    """The divert on the end's egress (its clsact must exist), in the end's namespace."""
    with netns(netns_path), IPRoute() as ipr:
        end_index, helper_index = (ipr.link_lookup(ifname=n)[0] for n in (end, helper))
        fd = bpf_load(divert_program(helper_index))
        try:
            ipr.tc("add-filter", "bpf", end_index, parent=CLSACT_EGRESS, prio=PREF, fd=fd, name="tb-delay",
                   direct_action=True)
        finally:
            os.close(fd)        # the filter holds the program


def undivert(end: str, mbps: float | None, mtu: int, queue: int | None = None) -> list[str]:
    """The end's rate back on the end, then frames straight to the wire again (the held ones follow)."""
    return ([tbf(end, mbps, mtu, queue), *beats_first(end, mbps, mtu, queue)] if mbps else []) + \
        [f"-tc filter del dev {end} egress pref {PREF}"]


def teardown(end: str, key: str, side: str, made_clsact: bool) -> list[str]:
    h, _ = helpers(key, side)
    return ([f"-tc qdisc del dev {end} clsact"] if made_clsact else []) + [f"-ip link del {h}"]


PROBE = ["ip link add tb-probe0 type veth peer name tb-probe1", "tc qdisc add dev tb-probe0 clsact"]
