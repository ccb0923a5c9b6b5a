"""The netem path's command lines (netem cannot run on our machines): a direction's delay on its sending end,
under its tbf when it has a rate, and taken away leaving the end as it was."""
from testbed.fabric import netem
from testbed.fabric.links import beats_first, tbf, tbf_burst, tbf_limit


def test_an_unshaped_end_gets_netem_as_its_root():
    assert netem.apply("eth0", 500) == ["tc qdisc replace dev eth0 root handle 1: netem delay 500us limit 1000"]
    assert netem.remove("eth0") == ["tc qdisc del dev eth0 root"]


def test_a_shaped_end_gets_netem_under_its_tbf_and_its_tbf_back_alone():
    cmds = netem.apply("tb-rail0-p3", 2000, mbps=10, mtu=9000)
    assert cmds[0] == (f"tc qdisc replace dev tb-rail0-p3 root handle 1: tbf rate 10mbit burst {tbf_burst(10, 9000)} "
                       f"limit {tbf_limit(10, 9000)}")
    assert cmds[1].startswith("tc qdisc replace dev tb-rail0-p3 parent 1:1 handle 20: netem delay 2000us limit ")
    assert netem.remove("tb-rail0-p3", 10, 9000) == ["tc qdisc del dev tb-rail0-p3 root", tbf("tb-rail0-p3", 10, 9000),
                                                     *beats_first("tb-rail0-p3", 10, 9000)]


def test_netem_holds_a_full_tbf_queue_plus_a_delay_of_traffic():
    # 1 MiB of tbf queue + 100 Mbit/s x 20 ms in flight, counted in 64-byte frames
    assert netem.netem_limit(20_000, 100, 1500) == int(((1 << 20) + 250_000) / 64) + 1
    assert netem.netem_limit(20_000, None, 1500) == netem.NETEM_MIN_LIMIT
    assert netem.netem_limit(1, 1, 1500) >= netem.NETEM_MIN_LIMIT


def test_fractional_microseconds_are_kept():
    assert "delay 1.5us" in netem.apply("eth0", 1.5)[0]


def test_a_links_own_queue_is_kept_under_netem_and_after_it():
    cmds = netem.apply("eth0", 1000, mbps=10, mtu=9000, queue=200_000)
    assert cmds[0].endswith("limit 200000") and f"limit {netem.netem_limit(1000, 10, 9000, 200_000)}" in cmds[1]
    assert netem.remove("eth0", 10, 9000, 200_000)[1] == tbf("eth0", 10, 9000, 200_000)


def test_a_lossy_end_gets_netems_random_loss():
    assert netem.apply("eth0", 500, loss=0.015)[0].endswith("netem delay 500us limit 1000 loss random 1.5%")
    assert "loss" not in netem.apply("eth0", 500)[0]
