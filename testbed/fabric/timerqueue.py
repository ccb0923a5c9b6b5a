"""The delay line's timer queue: frames of many links, each held until its own deadline.

Pure (no sockets, no clock): the delay process feeds it arrival times and asks for what is due.
Every frame gets its link's fixed delay. Arrival times can step back a little (a receive timestamp converted
between clocks, or a frame with none that gets its read time), so a link's deadline never goes below its last
one: a wire does not reorder. Ties are broken by arrival order, so a link's frames always leave in the order
they came.
"""
from __future__ import annotations

import heapq
import itertools


class TimerQueue:
    """Frames waiting for their deadline, across links. A link holds at most `limit` frames: beyond that it
    drops, as a full wire would (a sender that outruns an unshaped link)."""

    def __init__(self, limit: int = 10000):
        self.limit = limit
        self._heap: list[tuple[int, int, object, bytes]] = []
        self._order = itertools.count()
        self.held: dict[object, int] = {}       # link -> frames held
        self.dropped: dict[object, int] = {}
        self.last: dict[object, int] = {}       # link -> its latest deadline

    def push(self, link, frame: bytes, arrival_ns: int, delay_ns: int) -> bool:
        """Hold frame until arrival + delay; False (and counted) if the link already holds `limit` frames."""
        if self.held.get(link, 0) >= self.limit:
            self.dropped[link] = self.dropped.get(link, 0) + 1
            return False
        deadline = max(arrival_ns + delay_ns, self.last.get(link, arrival_ns + delay_ns))
        self.last[link] = deadline
        heapq.heappush(self._heap, (deadline, next(self._order), link, frame))
        self.held[link] = self.held.get(link, 0) + 1
        return True

    def due(self, now_ns: int):
        """(link, frame) for every frame whose deadline is at or before now, earliest first."""
        while self._heap and self._heap[0][0] <= now_ns:
            _, _, link, frame = heapq.heappop(self._heap)
            self.held[link] -= 1
            yield link, frame

    def next_deadline(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def release(self, link):
        """Every frame the link holds, in order, now (the link is being taken away); other links' frames stay."""
        mine = sorted(e for e in self._heap if e[2] == link)
        self._heap = [e for e in self._heap if e[2] != link]
        heapq.heapify(self._heap)
        self.held.pop(link, None)
        self.dropped.pop(link, None)
        self.last.pop(link, None)
        return [frame for *_, frame in mine]

    def __len__(self) -> int:
        return len(self._heap)
