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

from loadgen.analysis.baselines import KV, POOL_FULL, RUNNING, WAITING, preemption_rose
from loadgen.analysis.maxtree import ABSENT, MaxTree
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
        self._pool: tuple[int, int] | None = None
        if (
            isinstance(blocks, int)
            and isinstance(block_size, int)
            and blocks > 0
            and block_size > 0
        ):
            self._pool = (blocks, block_size)
        self._full = _full_flags(timeline.samples)
        flags = _unresolved_flags(timeline.samples)
        # Per interval i (its last poll i-1): none before the first poll.
        self._unresolved_ok = [False] + [
            flag and (cap is None or s.values.get(RUNNING) is None or s.values[RUNNING] < cap)
            for flag, s in zip(flags, timeline.samples, strict=True)
        ]
        # Intervals where the run-wide evidence (full, unresolved) differs from the one before.
        self._turns = [
            i
            for i in range(1, len(self._full))
            if (self._full[i], self._unresolved_ok[i])
            != (self._full[i - 1], self._unresolved_ok[i - 1])
        ]
        # Per interval, the highest kv of the polls bracketing it: where no room can be seen.
        kv = [s.values.get(KV, 0.0) for s in timeline.samples]
        self._kv_top = MaxTree([max(kv[max(i - 1, 0) : i + 1], default=ABSENT)
                                for i in range(len(kv) + 1)])  # fmt: skip

    def interval(self, t: float) -> int:
        """Index of the poll interval holding t: the polls bracketing t are number i-1 and i
        (one of them near the edges). The evidence is constant inside an interval, so a wait is
        judged once per interval, not per piece (per piece it was 6.9M bracket look-ups on a
        20,000-stream run, bench/trace_scale.yaml)."""
        return bisect.bisect_right(self._ts, t)

    def full_in(self, i: int) -> bool:
        """The *full* evidence in poll interval i."""
        return self._full[i]

    def no_room_in(self, i: int, seat: Seat, tokens: int | None) -> bool:
        """The *no room* evidence in poll interval i for a stream needing `tokens` of prefill."""
        need = self._need(tokens)
        if need is None:
            return False
        return any(
            s.values.get(KV, 0.0) + need >= POOL_FULL and self._queued(seat, s)
            for s in self.timeline.samples[max(i - 1, 0) : i + 1]
        )

    def cuts_between(self, t0: int, t1: int, tokens: int | None) -> list[int]:
        """Poll times in [t0, t1] where the evidence for a stream needing `tokens` of prefill
        may change: where the run-wide evidence turns, and around each interval whose polls
        leave too little room for it (the evidence is constant between them)."""
        k0, k1 = self.interval(t0), self.interval(t1)
        ts = self._ts
        out = [ts[k - 1] for k in self._turns[bisect.bisect_right(self._turns, k0) :
                                              bisect.bisect_right(self._turns, k1)]]  # fmt: skip
        need = self._need(tokens)
        if need is not None:
            for k in self._kv_top.where(k0, k1 + 1, lambda kv: kv + need >= POOL_FULL):
                out.extend(ts[j] for j in (k - 1, k) if 0 <= j < len(ts))
        return [t for t in out if t0 <= t <= t1]

    def _need(self, tokens: int | None) -> float | None:
        """The share of the pool a prompt of `tokens` needs (None: unknown)."""
        if self._pool is None or tokens is None:
            return None
        blocks, block_size = self._pool
        return math.ceil(tokens / block_size) / blocks

    def unresolved_in(self, i: int) -> bool:
        """The *unresolved preemption* evidence in poll interval i (its last poll's flag)."""
        return self._unresolved_ok[i]

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


def _full_flags(samples: list[MetricsSample]) -> list[bool]:
    """Per poll interval i (polls i-1 and i; one near the edges): kv >= POOL_FULL at a poll
    bracketing it, or the preemption counter rose between the two."""
    full = [s.values.get(KV, 0.0) >= POOL_FULL for s in samples]
    if not samples:
        return [False]
    inner = [
        full[i - 1] or full[i] or preemption_rose(samples[i - 1], samples[i])
        for i in range(1, len(samples))
    ]
    return [full[0], *inner, full[-1]]


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
