"""Tells a multicast job's ranks when the switches hold their groups' trees.

Ranks join a group (IGMP) and must not send to it before every switch has the group's rules: chunks sent
while the tree still changed were partly missing from the switch counters (0.990 of the minimal trees).
Ranks cannot ask the controller (it listens on this machine's loopback), so this thread reads the
controller's state and writes each installed group's members into the job's file store and each epoch's
(a re-formed job rendezvouses in its own): `installed_key(GROUP)` -> [host, ...].
A rank waits until that list holds its whole group (hosts/collectives/mcast_allgather.py).

At the end the ranks stay in their groups for HOLD_S before they close (hosts/collectives/rank.finish):
Open vSwitch credits a datapath flow's latest packets to the ports of its translation at the next
revalidator round (every 0.5 s), so a tree pruned before that round (members leave on exit) credits them
to the pruned tree, and the job's last bytes on the switch-to-switch (patch) links went uncounted:
the network's bytes read as low as 0.68 of the minimal trees on a 2 x 2 fabric.
"""
from __future__ import annotations

import threading

from hosts.collectives.mcast_allgather import installed_key
from hosts.collectives.store import FileStore
from hosts.recovery.membership import epoch_dirs

POLL_S = 0.02
HOLD_S = 1.0            # two revalidator rounds


class TreesReady:
    """Publishes installed groups to a job's stores until stopped. net: anything with
    multicast_installed_members() (testbed/fabric/network.Network)."""

    def __init__(self, net, job_dir: str):
        self.net, self.job_dir = net, job_dir
        self.published: dict[tuple[str, str], list[str]] = {}      # (store directory, group) -> members
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="multicast-ready", daemon=True)

    def start(self) -> "TreesReady":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def poll(self) -> None:
        """One look at the controller's state; publishes what changed."""
        installed = self.net.multicast_installed_members()
        for directory in [self.job_dir] + epoch_dirs(self.job_dir):
            for group, members in installed.items():
                if self.published.get((directory, group)) != members:
                    FileStore(directory).set(installed_key(group), members)
                    self.published[(directory, group)] = members

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll()
            self._stop.wait(POLL_S)
