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
from collections.abc import Callable
from typing import Any

from loadgen.analysis.baselines import KV, POOL_FULL, RUNNING, WAITING, preemption_rose
from loadgen.analysis.maxtree import ABSENT, Counts, MaxTree
from loadgen.analysis.occupancy import Seat
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
        # The streams after a rank in admission order, sent and still without a first token at
        # an instant: the sends at or before it less the prefill ends at or before it, each
        # counted in trees that hold the streams not yet `_held` back.
        self._by_rank = sorted(
            (s for s in seats.values() if s.sent_ns < s.prefill_end_ns), key=lambda s: s.rank
        )
        self._sents = sorted(s.sent_ns for s in self._by_rank)
        self._ends = sorted(s.prefill_end_ns for s in self._by_rank)
        self._sent_at = _places(self._by_rank, self._sents, lambda s: s.sent_ns)
        self._end_at = _places(self._by_rank, self._ends, lambda s: s.prefill_end_ns)
        self._sent_count = Counts(len(self._by_rank), 1)
        self._end_count = Counts(len(self._by_rank), 1)
        self._held = 0  # streams of _by_rank not in the trees: those ranked at or before _after
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
        samples = self.timeline.samples
        return any(
            samples[j].values.get(KV, 0.0) + need >= POOL_FULL and self._queued(seat, j)
            for j in range(max(i - 1, 0), min(i + 1, len(samples)))
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

    def _queued(self, seat: Seat, j: int) -> bool:
        """True if poll j's `waiting` count reaches this stream, counting back from the latest
        stream in admission order sent and still without a first token at the poll."""
        poll = self.timeline.samples[j]
        t = poll.t_ns
        if not seat.sent_ns <= t < seat.prefill_end_ns:
            return False
        return self._pending_after(seat.rank, t) < poll.values.get(WAITING, 0)

    def _pending_after(self, rank: int, t: int) -> int:
        """Streams ranked after `rank`, sent and without a first token at t. Asked in rank
        order (as the verdicts do), each stream leaves the trees once; counted stream by
        stream for every poll of every wait it took 435 s for 800 streams queued at a near-full
        pool."""
        order = self._by_rank
        while self._held < len(order) and order[self._held].rank <= rank:
            self._sent_count.add(self._sent_at[self._held], -1)
            self._end_count.add(self._end_at[self._held], -1)
            self._held += 1
        while self._held > 0 and order[self._held - 1].rank > rank:
            self._held -= 1
            self._sent_count.add(self._sent_at[self._held], 1)
            self._end_count.add(self._end_at[self._held], 1)
        sent = self._sent_count.below(bisect.bisect_right(self._sents, t))
        return sent - self._end_count.below(bisect.bisect_right(self._ends, t))


def _places(order: list[Seat], values: list[int], key: Callable[[Seat], int]) -> list[int]:
    """Each stream's place among `values` (sorted), equal values given places in turn."""
    taken: dict[int, int] = {}
    out = []
    for s in order:
        v = key(s)
        out.append(bisect.bisect_left(values, v) + taken.get(v, 0))
        taken[v] = taken.get(v, 0) + 1
    return out


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
