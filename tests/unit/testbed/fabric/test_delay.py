"""Link delay's interface: validation of what is asked, the choice of path (netem first), one clear line where no
path works, and the CLI's exit status 2 for it."""
import pytest

from testbed.fabric import delay
from testbed.fabric.delay import End, LinkDelay


def link(**kw) -> LinkDelay:
    base = dict(key="7", a=End("eth0", "/proc/1/ns/net", mbps=10, mtu=9000), b=End("tb-rail0-p3"), delay_us=500)
    return LinkDelay(**{**base, **kw})


def test_a_sound_link_has_no_problems_and_both_directions():
    assert delay.problems(link()) == []
    assert [(side, us) for side, _, us in link().directions()] == [("a", 500), ("b", 500)]
    assert [us for *_, us in link(delay_us_ba=20).directions()] == [500, 20]


@pytest.mark.parametrize("kw, words", [
    ({"key": "Ab"}, "key 'Ab'"), ({"key": ""}, "key ''"), ({"key": "12345678"}, "key '12345678'"),
    ({"delay_us": -1}, "delay -1 us from a"), ({"delay_us": "5"}, "delay '5' us"),
    ({"delay_us_ba": 1e9}, "from b"),
    ({"a": End("tb-a-name-far-too-long")}, "end a: device name"),
    ({"b": End("x", mbps=0)}, "end b: rate 0"), ({"b": End("x", mtu=70000)}, "end b: MTU 70000"),
])
def test_what_is_wrong_is_named(kw, words):
    found = delay.problems(link(**kw))
    assert any(words in p for p in found), found


def test_apply_refuses_a_bad_link_before_touching_anything():
    d = delay.Delays(path="userspace")
    with pytest.raises(ValueError, match="link delay 7: delay -5 us"):
        d.apply(link(delay_us=-5))
    assert d.links == {} and d.proc is None


def test_netem_is_preferred_and_the_user_space_path_is_the_fallback():
    assert delay.delay_paths({"netem": None, "userspace": None}) == ("netem", "userspace")
    assert delay.choose_path({"netem": None, "userspace": None}) == "netem"
    assert delay.choose_path({"netem": "Specified qdisc kind is unknown", "userspace": None}) == "userspace"


def test_no_path_is_one_line_naming_each_reason():
    with pytest.raises(delay.DelayUnavailable) as exc:
        delay.choose_path({"netem": "qdisc kind is unknown", "userspace": "needs root"})
    text = str(exc.value)
    assert "\n" not in text and "netem: qdisc kind is unknown" in text and "userspace: needs root" in text


def test_without_root_no_path_is_tried(monkeypatch):
    monkeypatch.setattr(delay.os, "geteuid", lambda: 1000)
    assert delay.probe("netem") == delay.probe("userspace") == "needs root"


def test_commands_run_in_the_ends_namespace():
    assert delay.in_netns("/run/netns/tb-dA", "-tc qdisc del dev e root") == [
        "nsenter", "--net=/run/netns/tb-dA", "tc", "qdisc", "del", "dev", "e", "root"]
    assert delay.in_netns(None, "tc filter add dev e egress bpf bytecode '1,6 0 0 0'")[-1] == "1,6 0 0 0"


def test_the_command_line_turns_no_path_into_exit_status_2(monkeypatch, capsys):
    from testbed import cli
    real = cli.parser

    def no_delay(args):
        raise delay.DelayUnavailable("link delay: no way to delay a link on this machine: netem: unknown")

    class Parser:       # any verb whose run asks for a delay where none works
        def parse_args(self, argv):
            args = real().parse_args(argv)
            args.func = no_delay
            return args
    monkeypatch.setattr(cli, "parser", Parser)
    assert cli.main(["plan", "--table2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["testbed plan: error: link delay: no way to delay a link on this machine: netem: unknown"]


def test_asking_for_delays_where_no_path_works_raises_before_anything_is_made(monkeypatch):
    monkeypatch.setattr(delay, "path_problems", lambda: {"netem": "unknown qdisc", "userspace": "no BPF"})
    with pytest.raises(delay.DelayUnavailable, match="netem: unknown qdisc; userspace: no BPF"):
        delay.Delays()


def test_an_end_of_a_fabric_link_is_shaped_as_the_link_is():
    from testbed.fabric.links import Link
    shaped = Link("s0g0", "rail0", 20.0, 0, 1, "nic", mtu=9000, queue_bytes=500_000)
    patch = Link("rail0", "spine0", 40.0, 9, 1, "uplink", shaped=False)
    assert End.of(shaped, "eth0", "/proc/7/ns/net") == End("eth0", "/proc/7/ns/net", 20.0, 9000, 500_000)
    assert End.of(patch, "tb-rail0-p9", None).mbps is None
    assert any("queue of 100 bytes" in p for p in delay.problems(link(a=End("eth0", mtu=1500, queue_bytes=100))))
