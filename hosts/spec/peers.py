"""Where a job's ranks run: a peer (a rank of the job's first epoch) and a member (a rank of an epoch's
membership, numbered by its position). The collective library's comm.Peer is this Peer."""
from __future__ import annotations

import dataclasses

from hosts.spec.base import Spec


@dataclasses.dataclass(frozen=True)
class Peer(Spec):
    rank: int
    name: str
    ip: str
    hb_ip: str | None = None
    server: int | None = None
    local_rank: int | None = None

    def entry(self) -> dict:
        """This peer as a member entry of a membership (a plain dict: the job's store holds them as JSON)."""
        return {k: v for k, v in self.to_dict().items() if k != "rank"}


@dataclasses.dataclass(frozen=True)
class Member(Spec):
    """A member entry: a peer without its number (an epoch numbers its members by their position)."""
    name: str
    ip: str
    hb_ip: str | None = None
    server: int | None = None
    local_rank: int | None = None
