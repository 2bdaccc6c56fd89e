"""The client's own timing error: how late the event loop ran while each stream was open.

Every timestamp the client takes is read when the loop gets round to a socket, so a loop busy
with other streams stamps an event late by up to one loop iteration. A ticker that sleeps
TICK_S and notes how late it woke measures exactly that delay. Each stream takes the largest
lag in its TTFT window (send to the tick after its first content chunk: the error of the two
stamps TTFT is made of) and over its whole life (the error of its chunk gaps). Lags are kept
in blocks with a running maximum per block, so "largest lag between ticks i and j" costs
O(blocks), not O(ticks), at stream end.
Lags are held in whole microseconds: small ints are shared objects in CPython, so an hour of
healthy ticks costs a list of pointers, not an int object each.
"""

from __future__ import annotations

import asyncio
from time import perf_counter_ns

TICK_S = 0.002
_BLOCK = 256


class LoopLagTicker:
    """Run `run()` as a task on the loop being measured; `mark()` and `max_since()` per stream."""

    __slots__ = ("_block_max", "_lags")

    def __init__(self) -> None:
        self._lags: list[int] = []
        self._block_max: list[int] = []

    def mark(self) -> int:
        """A position to ask `max_since` about later (taken when a stream is sent)."""
        return len(self._lags)

    def max_since(self, mark: int) -> int:
        """The largest lag (ns, to the us) of any tick after `mark`; 0 when none has ticked."""
        return self.max_between(mark, len(self._lags))

    def max_between(self, start: int, end: int) -> int:
        """The largest lag (ns, to the us) of ticks start..end-1 (marks); 0 for none."""
        end = min(end, len(self._lags))
        if start >= end:
            return 0
        lags, blocks = self._lags, self._block_max
        first_full, last_full = -(-start // _BLOCK), end // _BLOCK
        if first_full >= last_full:
            return max(lags[start:end]) * 1000
        best = max(blocks[first_full:last_full])
        head = lags[start : first_full * _BLOCK]
        tail = lags[last_full * _BLOCK : end]
        return max(best, max(head, default=0), max(tail, default=0)) * 1000

    def add(self, lag_us: int) -> None:
        lags = self._lags
        if len(lags) % _BLOCK == 0:
            self._block_max.append(lag_us)
        elif lag_us > self._block_max[-1]:
            self._block_max[-1] = lag_us
        lags.append(lag_us)

    async def run(self) -> None:
        period_ns = int(TICK_S * 1e9)
        while True:
            before = perf_counter_ns()
            await asyncio.sleep(TICK_S)
            self.add(max(0, perf_counter_ns() - before - period_ns) // 1000)
