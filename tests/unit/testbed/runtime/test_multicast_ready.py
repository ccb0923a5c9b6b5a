"""The testbed tells a multicast job's ranks when every switch holds their group's tree; the ranks wait for
that instead of a fixed pause (a chunk sent before bypasses the tree and the switch counters)."""
import threading
import time
from types import SimpleNamespace

import pytest

from hosts.collectives.mcast_allgather import Multicast, installed_key
from hosts.collectives.store import FileStore, StoreTimeout
from hosts.recovery.membership import epoch_dir
from testbed.runtime.multicast_ready import TreesReady

GROUP = "239.1.2.3"


class FakeNet:
    def __init__(self):
        self.installed = {}

    def multicast_installed_members(self):
        return dict(self.installed)


def test_installed_groups_are_published_to_the_job_and_every_epoch(tmp_path):
    net, job = FakeNet(), str(tmp_path)
    ready = TreesReady(net, job)
    ready.poll()
    assert not FileStore(job).exists(installed_key(GROUP))           # nothing installed yet: nothing said
    net.installed = {GROUP: ["s0g0", "s1g0"]}
    FileStore(epoch_dir(job, 1))                                      # a re-formed job's rendezvous
    ready.poll()
    for d in (job, epoch_dir(job, 1)):
        assert FileStore(d).get(installed_key(GROUP), timeout=0) == ["s0g0", "s1g0"]
    net.installed = {GROUP: ["s0g0", "s0g1", "s1g0"]}                 # a member joined and its tree is in
    ready.poll()
    assert FileStore(job).get(installed_key(GROUP), timeout=0) == ["s0g0", "s0g1", "s1g0"]


def test_a_republished_unchanged_group_is_not_rewritten(tmp_path):
    net = FakeNet()
    net.installed = {GROUP: ["a", "b"]}
    ready = TreesReady(net, str(tmp_path))
    ready.poll()
    path = tmp_path / installed_key(GROUP).replace("/", "__")
    stamp = path.stat().st_mtime_ns
    time.sleep(0.01)
    ready.poll()
    assert path.stat().st_mtime_ns == stamp


def waiting_rank(store, timeout=5.0):
    """What Multicast._await_trees reads of its instance."""
    return SimpleNamespace(comm=SimpleNamespace(store=store, timeout=timeout), address=GROUP)


def test_a_rank_waits_until_the_installed_tree_holds_its_whole_group(tmp_path):
    store = FileStore(str(tmp_path))
    net, ready = FakeNet(), TreesReady(FakeNet(), str(tmp_path))
    ready.net = net

    def controller():
        time.sleep(0.2)
        net.installed = {GROUP: ["a"]}               # installed, but for the members so far only
        ready.poll()
        time.sleep(0.3)
        net.installed = {GROUP: ["a", "b", "c"]}
        ready.poll()
    threading.Thread(target=controller).start()
    t0 = time.monotonic()
    Multicast._await_trees(waiting_rank(store), ["a", "b"])
    assert time.monotonic() - t0 >= 0.45             # the partial list did not release it


def test_a_rank_gives_up_naming_the_switches_when_no_tree_is_reported(tmp_path):
    with pytest.raises(StoreTimeout, match=f"multicast tree of {GROUP}"):
        Multicast._await_trees(waiting_rank(FileStore(str(tmp_path)), timeout=0.3), ["a"])
    store = FileStore(str(tmp_path))
    store.set(installed_key(GROUP), ["a"])                     # a tree without this rank's peer
    with pytest.raises(StoreTimeout, match=f"multicast tree of {GROUP}"):
        Multicast._await_trees(waiting_rank(store, timeout=0.3), ["a", "b"])
