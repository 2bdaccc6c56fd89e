"""The client's own loop-lag monitor counts only stalls inside the timed phase."""

from __future__ import annotations

import asyncio
import gc

import pytest

from loadgen.client import lag
from loadgen.client.lag import LoopLagMonitor, quiet_collector


async def test_a_stall_that_began_before_measuring_is_not_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A fake clock: each 10 ms tick overruns by the next planned stall. Measuring starts during
    # the first tick (a 50 ms stall: prompts built, a collection between reps), which is
    # therefore not the timed streams' lag; the two ticks wholly inside are.
    mon = LoopLagMonitor(interval_s=0.01)
    now = [0]
    stalls = iter([50_000_000, 1_000_000, 2_000_000])
    measuring = mon.measuring()

    async def fake_sleep(seconds: float) -> None:
        try:
            now[0] += round(seconds * 1e9) + next(stalls)
        except StopIteration:
            raise asyncio.CancelledError from None
        if not mon._active:
            measuring.__enter__()

    monkeypatch.setattr(lag.time, "perf_counter_ns", lambda: now[0])
    monkeypatch.setattr(lag.asyncio, "sleep", fake_sleep)
    with pytest.raises(asyncio.CancelledError):
        await mon.run()
    assert mon.lags_ns == [1_000_000, 2_000_000]
    assert mon.summary_ms()["loop_lag_max_ms"] == 2.0


async def test_an_early_wake_is_no_lag(monkeypatch: pytest.MonkeyPatch) -> None:
    # uvloop's millisecond timers end a 10 ms sleep up to 0.72 ms early (measured); counted
    # as -0.72 ms, the live histogram's sum fell between two scrapes.
    mon = LoopLagMonitor(interval_s=0.01)
    now = [0]
    overruns = iter([-720_000, 1_000_000, -1])

    async def fake_sleep(seconds: float) -> None:
        try:
            now[0] += round(seconds * 1e9) + next(overruns)
        except StopIteration:
            raise asyncio.CancelledError from None

    monkeypatch.setattr(lag.time, "perf_counter_ns", lambda: now[0])
    monkeypatch.setattr(lag.asyncio, "sleep", fake_sleep)
    with mon.measuring(), pytest.raises(asyncio.CancelledError):
        await mon.run()
    assert mon.lags_ns == [0, 1_000_000, 0]


def test_quiet_collector_leaves_live_objects_out_of_the_collectors_reach() -> None:
    keep = [[i] for i in range(1000)]
    try:
        quiet_collector()
        assert gc.get_freeze_count() >= len(keep)
    finally:
        gc.unfreeze()
