"""Event-loop lag: how late the client itself was, so a run can say it was client-limited."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np


class LoopLagMonitor:
    """Sleeps `interval_s` repeatedly and records how much later than asked it woke up.

    A busy loop (too many streams for one core) delays every timestamp the client takes; this
    is the measurement that says so instead of blaming the server. Only lag inside
    `measuring()` counts: building a 72k-token prompt between reps stalls the loop too, but
    no stream is being timed then.
    """

    def __init__(self, interval_s: float = 0.01) -> None:
        self._interval_s = interval_s
        self._active = False
        self.lags_ns: list[int] = []

    @contextmanager
    def measuring(self) -> Iterator[None]:
        self._active = True
        try:
            yield
        finally:
            self._active = False

    async def run(self) -> None:
        while True:
            before, counting = time.perf_counter_ns(), self._active
            await asyncio.sleep(self._interval_s)
            # A tick that began before `measuring()` spans untimed work (building prompts, a
            # collection between reps): counted, it blamed that stall on the timed streams.
            if counting and self._active:
                self.lags_ns.append(lateness_ns(time.perf_counter_ns(), before, self._interval_s))

    def summary_ms(self) -> dict[str, float]:
        """Max and p99 of observed loop lag in ms (zeros when nothing was observed)."""
        if not self.lags_ns:
            return {"loop_lag_max_ms": 0.0, "loop_lag_p99_ms": 0.0}
        lags = np.asarray(self.lags_ns, dtype=np.float64) / 1e6
        return {
            "loop_lag_max_ms": round(float(lags.max()), 3),
            "loop_lag_p99_ms": round(float(np.percentile(lags, 99)), 3),
        }


def lateness_ns(woke_ns: int, slept_at_ns: int, interval_s: float) -> int:
    """How much later than asked a sleep woke; never below 0. uvloop's timers tick in whole
    milliseconds, so a sleep can end early (7 of 300 10 ms sleeps here, by up to 0.72 ms):
    an early wake is no lag, and counted below 0 it made the live lag histogram's sum fall
    between two scrapes."""
    return max(0, woke_ns - slept_at_ns - int(interval_s * 1e9))


def quiet_collector() -> None:
    """Collects now, then moves every live object out of the cyclic collector's reach, so a
    full collection cannot stall the loop while streams are timed: in a ladder run on the
    sim, the client's own gen-2 collections paused it 24-146 ms mid-stream. Called between
    timed phases; objects created after it are still collected."""
    gc.collect()
    gc.freeze()
