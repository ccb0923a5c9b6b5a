"""The user-space path's command lines: helper names within IFNAMSIZ under the fabric tag, the rate limiter on the
helper (rate, then delay), the divert added last and removed first, and nothing left by the teardown."""
import pytest

from testbed.fabric import delayline
from testbed.fabric.links import IFNAMSIZ, tbf


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
    assert cmds[-2:] == [tbf("tb-ddl7a", 10, 9000), "-tc qdisc del dev eth0 root"]
    assert not any("tbf" in c for c in delayline.setup("eth0", "7", "a", None, 9000))


def test_divert_redirects_unmarked_frames_to_the_helper():
    cmds = delayline.divert("eth0", "7", "a", make_clsact=True)
    assert cmds[0] == "tc qdisc add dev eth0 clsact"
    assert cmds[1] == (f"tc filter add dev eth0 egress pref {delayline.PREF} bpf bytecode '{delayline.DIVERT_BPF}' "
                       "action mirred egress redirect dev tb-ddl7a")
    assert len(delayline.divert("eth0", "7", "a", make_clsact=False)) == 1


def test_undivert_puts_the_rate_back_before_frames_go_straight_again():
    assert delayline.undivert("eth0", 10, 9000) == [tbf("eth0", 10, 9000), f"-tc filter del dev eth0 egress pref 49"]
    assert delayline.undivert("eth0", None, 9000) == ["-tc filter del dev eth0 egress pref 49"]


def test_teardown_removes_the_helpers_and_only_a_clsact_it_made():
    assert delayline.teardown("eth0", "7", "a", True) == ["-tc qdisc del dev eth0 clsact", "-ip link del tb-ddl7a"]
    assert delayline.teardown("eth0", "7", "a", False) == ["-ip link del tb-ddl7a"]
