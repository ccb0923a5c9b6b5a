"""The user-space path's command lines: helper names within IFNAMSIZ under the fabric tag, the rate limiter on the
helper (rate, then delay), the divert added last and removed first, and nothing left by the teardown."""
import struct

import pytest

from testbed.fabric import delayline
from testbed.fabric.delayd import MARK
from testbed.fabric.links import IFNAMSIZ, beats_first, tbf


@pytest.fixture(autouse=True)
def tag(monkeypatch):
    monkeypatch.setenv("TESTBED_FABRIC_TAG", "d")


def test_helpers_carry_the_prefix_and_tag_and_fit_the_kernels_limit():
    h, hp = delayline.helpers("1234567", "b")
    assert (h, hp) == ("tb-ddl1234567b", "tb-ddl1234567bp")
    assert len(hp) <= IFNAMSIZ


def test_setup_moves_the_rate_onto_the_helper():
    cmds = delayline.setup("eth0", "7", "a", 10, 9000)
    assert cmds[0] == "ip link add tb-ddl7a mtu 65535 type veth peer name tb-ddl7ap mtu 65535"
    assert "ip link set tb-ddl7a addrgenmode none" in cmds and "ip link set tb-ddl7ap up" in cmds
    assert cmds[-7:] == [tbf("tb-ddl7a", 10, 9000), *beats_first("tb-ddl7a", 10, 9000), "-tc qdisc del dev eth0 root"]
    assert not any("tbf" in c for c in delayline.setup("eth0", "7", "a", None, 9000))


def run_divert(program: bytes, mark: int):
    """The divert program run on a frame with this mark, by an interpreter of the instructions it uses: its
    verdict (0: TC_ACT_OK, the frame goes on) or the redirect it asks for."""
    ins = [struct.unpack("<BBhi", program[i:i + 8]) for i in range(0, len(program), 8)]
    reg, pc = {1: "skb"}, 0
    while True:
        code, regs, off, imm = ins[pc]
        dst, src = regs & 0xf, regs >> 4
        pc += 1
        if code == 0x61:                        # ldxw dst, [src + off]
            assert reg[src] == "skb" and off == 8      # __sk_buff.mark
            reg[dst] = mark
        elif code == 0x15:                      # jeq dst, imm, +off
            pc += off if reg[dst] == imm else 0
        elif code == 0x62:                      # stw [dst + off], imm
            assert reg[dst] == "skb" and off == 8
            mark = imm
        elif code == 0xb7:                      # mov dst, imm
            reg[dst] = imm
        elif code == 0x85:                      # call
            assert imm == 23                    # bpf_redirect(ifindex, flags)
            reg[0] = ("redirect", reg[1], reg[2])
        elif code == 0x95:                      # exit
            return reg[0], mark
        else:
            raise AssertionError(f"instruction {code:#x}")


def test_the_divert_sends_unmarked_frames_to_the_helpers_egress_and_lets_marked_ones_go():
    program = delayline.divert_program(42)
    assert len(program) == 72
    assert run_divert(program, 0) == (("redirect", 42, 0), 0)          # flags 0: to the helper's egress
    assert run_divert(program, 7) == (("redirect", 42, 0), 7)          # other marks are left alone
    assert run_divert(program, MARK) == (0, 0)                         # on to the wire, unmarked


def test_undivert_puts_the_rate_back_before_frames_go_straight_again():
    assert delayline.undivert("eth0", 10, 9000) == [tbf("eth0", 10, 9000), *beats_first("eth0", 10, 9000),
                                                     "-tc filter del dev eth0 egress pref 49"]
    assert delayline.undivert("eth0", None, 9000) == ["-tc filter del dev eth0 egress pref 49"]


def test_teardown_removes_the_helpers_and_only_a_clsact_it_made():
    assert delayline.teardown("eth0", "7", "a", True) == ["-tc qdisc del dev eth0 clsact", "-ip link del tb-ddl7a"]
    assert delayline.teardown("eth0", "7", "a", False) == ["-ip link del tb-ddl7a"]


def test_the_links_queue_moves_with_its_rate():
    assert delayline.setup("eth0", "7", "a", 10, 9000, 300_000)[-7] == tbf("tb-ddl7a", 10, 9000, 300_000)
    assert "bfifo limit 300000" in delayline.setup("eth0", "7", "a", 10, 9000, 300_000)[-3]
    assert delayline.undivert("eth0", 10, 9000, 300_000)[0] == tbf("eth0", 10, 9000, 300_000)
