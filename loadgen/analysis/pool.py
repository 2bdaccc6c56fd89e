"""When the KV pool, not a seat cap or another request's prefill, held a stream back.

Evidence at an instant t of a stream's wait, from run-directory data only (metrics.jsonl polls,
run.json's pool size, the streams' own timestamps):
- *full*: a poll bracketing t shows kv >= POOL_FULL, or the preemption counter rose between
  the two polls bracketing t;
- *no room*: a poll bracketing t shows the stream queued (it is among the poll's `waiting`
  latest streams in occupancy.py's admission order still without a first token: an FCFS
  queue holds the newest) and the free
  pool could not take its prompt: kv + its prompt's blocks / num_gpu_blocks >= POOL_FULL. Needs
  run.json's server.num_gpu_blocks and block_size; without them it is never claimed. A preempted
  request counts in `waiting` too, so while one waits an admitted stream can look queued: the
  pool is then near full anyway, but this evidence may over-claim;
- *unresolved preemption*: at the last poll at or before t, the preemption counter had risen at
  or before that poll and requests have waited at every poll since the rise (waiting > 0), with
  running below the cap when one is known: the preempted request has not got its blocks back,
  so whoever queues behind it waits on the pool although kv stays under POOL_FULL.
"""

from __future__ import annotations

import bisect
import math
from typing import Any

from loadgen.analysis.limits import KV, POOL_FULL, RUNNING, WAITING, preemption_rose
from loadgen.analysis.occupancy import TIE_WINDOW_NS, Seat
from loadgen.analysis.timeline import Timeline
from loadgen.records import MetricsSample


class PoolEvidence:
    """The module's three pieces of evidence over one run."""

    def __init__(
        self,
        timeline: Timeline,
        seats: dict[str, Seat],
        cap: int | None,
        server: dict[str, Any],
    ) -> None:
        self.timeline = timeline
        self.cap = cap
        self._ts = [s.t_ns for s in timeline.samples]
        self._order = sorted(seats.values(), key=lambda s: s.rank)
        blocks, block_size = server.get("num_gpu_blocks"), server.get("block_size")
        sized = isinstance(blocks, int) and isinstance(block_size, int)
        self._pool = (blocks, block_size) if sized and blocks > 0 and block_size > 0 else None
        self._unresolved = _unresolved_flags(timeline.samples)

    def full_at(self, t: float) -> bool:
        """The *full* evidence at t."""
        around = self.timeline.bracket(int(t))
        if any(s.values.get(KV, 0.0) >= POOL_FULL for s in around):
            return True
        return len(around) == 2 and preemption_rose(around[0], around[1])

    def no_room_at(self, t: float, seat: Seat, tokens: int | None) -> bool:
        """The *no room* evidence at t for a stream needing `tokens` of prefill."""
        if self._pool is None or tokens is None:
            return False
        blocks, block_size = self._pool
        need = math.ceil(tokens / block_size) / blocks
        return any(
            s.values.get(KV, 0.0) + need >= POOL_FULL and self._queued(seat, s)
            for s in self.timeline.bracket(int(t))
        )

    def unresolved_preemption_at(self, t: float) -> bool:
        """The *unresolved preemption* evidence at t."""
        i = bisect.bisect_right(self._ts, t) - 1
        if i < 0 or not self._unresolved[i]:
            return False
        running = self.timeline.samples[i].values.get(RUNNING)
        return self.cap is None or running is None or running < self.cap

    def _queued(self, seat: Seat, poll: MetricsSample) -> bool:
        """True if the poll's `waiting` count reaches this stream, counting back from the
        latest stream in admission order sent and still without a first token at the poll."""
        t = poll.t_ns
        if not seat.sent_ns <= t < seat.prefill_end_ns:
            return False
        later = 0
        for s in self._order[seat.rank + 1 :]:
            # Admission order is send order but within a tie window: past it, all sent later.
            if s.sent_ns > t + TIE_WINDOW_NS:
                break
            later += int(s.sent_ns <= t < s.prefill_end_ns)
        return later < poll.values.get(WAITING, 0)


def _unresolved_flags(samples: list[MetricsSample]) -> list[bool]:
    """Per poll: a preemption at or before it whose queue has not drained since."""
    flags: list[bool] = []
    state = False
    prev: MetricsSample | None = None
    for s in samples:
        if s.values.get(WAITING, 0) <= 0:
            state = False
        elif preemption_rose(prev, s):
            state = True
        flags.append(state)
        prev = s
    return flags
