"""The controller's state files (controllers/state.py): both apps write through it, the testbed reads through it,
and a reader takes a missing or half-written file as "nothing yet"."""
import json
import os
from types import SimpleNamespace

from controllers import state
from controllers.fabric_app import FabricRouting
from controllers.multicast_app import MulticastTrees


def test_write_is_atomic_and_reads_round_trip(tmp_path):
    path = str(tmp_path / "controller-state.json")
    state.write(path, {"switches": {"leaf0": {}}, "down": [["rail1", 4]], "errors": []})
    assert state.read_routing(path) == {"switches": {"leaf0": {}}, "down": [["rail1", 4]], "errors": []}
    assert os.listdir(tmp_path) == ["controller-state.json"]           # no temporary file left behind
    state.write(state.multicast_path(path), {"groups": {"239.1.2.3": {"members": ["s0g0"]}}, "installed": True})
    assert state.multicast_path(path) == path + ".mcast"
    assert state.multicast_groups(path) == {"239.1.2.3": {"members": ["s0g0"]}}
    assert state.multicast_installed(path) is True


def test_readers_tolerate_a_missing_or_partial_file(tmp_path):
    path = str(tmp_path / "controller-state.json")
    assert state.read_routing(path) == {}
    assert state.multicast_groups(path) == {} and state.multicast_installed(path) is False
    assert state.multicast_removed(path) == {"bytes": {}, "pending": 0, "group_hosts": {}}
    for p in (path, path + ".mcast"):
        with open(p, "w") as f:
            f.write('{"groups": {"239.')                             # a writer that bypassed write()
    assert state.read_routing(path) == {}
    assert state.multicast_groups(path) == {} and state.multicast_installed(path) is False
    with open(path + ".mcast", "w") as f:
        json.dump({"events": []}, f)                                   # written, without those keys
    assert state.multicast_groups(path) == {} and state.multicast_installed(path) is False


def test_both_apps_save_through_it(tmp_path):
    path = str(tmp_path / "controller-state.json")
    routing = SimpleNamespace(state_path=path, mode="ecmp", failover=True, installed={"leaf0": {"n": 3}},
                              topo=SimpleNamespace(down={("spine1", 2)}), port_events=[], errors=[])
    FabricRouting.save_state(routing)
    assert state.read_routing(path) == {"mode": "ecmp", "failover": True, "switches": {"leaf0": {"n": 3}},
                                        "down": [["spine1", 2]], "port_events": [], "errors": []}
    mcast = SimpleNamespace(state_path=state.multicast_path(path), members={}, awaiting={}, installed={"leaf0": [1]},
                            history=[{"at": 1}], errors=[], topo=None, ignored={},
                            removed={"rail0": {"239.1.2.3>all:1,3": 4000}}, removing={("rail1", "239.1.2.3", 2, 200): (1,)},
                            removed_dropped=0, group_hosts={"239.1.2.3": {"s1g0", "s0g0"}})
    MulticastTrees.save_state(mcast)
    assert state.multicast_groups(path) == {} and state.multicast_installed(path) is True
    assert state.multicast_removed(path) == {"bytes": {"rail0": {"239.1.2.3>all:1,3": 4000}}, "pending": 1,
                                             "group_hosts": {"239.1.2.3": ["s0g0", "s1g0"]}}
    assert state.read_routing(path)["mode"] == "ecmp"                 # the two files are separate
    assert sorted(os.listdir(tmp_path)) == ["controller-state.json", "controller-state.json.mcast"]
