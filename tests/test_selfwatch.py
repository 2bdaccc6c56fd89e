"""The client's self-watch reads this process's real RSS and CPU time, and loop lateness."""

from __future__ import annotations

import asyncio
import time

from loadgen.engine.selfwatch import SelfWatch, cpu_seconds, rss_bytes


def test_rss_is_the_current_resident_size_not_the_peak() -> None:
    before = rss_bytes()
    block = bytearray(64 * 2**20)  # zero pages are only resident once touched
    block[::4096] = b"\x01" * len(block[::4096])
    grown = rss_bytes()
    del block
    assert grown - before >= 48 * 2**20
    assert rss_bytes() < grown - 32 * 2**20  # given back: a peak would not fall


def test_cpu_time_counts_work_done() -> None:
    before = cpu_seconds()
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:
        pass
    assert cpu_seconds() - before >= 0.19


async def test_a_blocked_loop_shows_up_as_lag() -> None:
    samples: list[dict] = []
    watch = SelfWatch(samples.append, run_start_ns=time.perf_counter_ns(), every_s=0.2,
                      tick_s=0.01)  # fmt: skip
    task = asyncio.create_task(watch.run())
    await asyncio.sleep(0.05)
    time.sleep(0.3)  # the loop is blocked: the watch cannot wake on time
    await asyncio.sleep(0.5)
    task.cancel()
    assert max(s["lag_max_ms"] for s in samples) >= 250
    assert all(s["rss_bytes"] > 0 and s["cpu_s"] > 0 for s in samples)
    assert [s["t_ns"] for s in samples] == sorted(s["t_ns"] for s in samples)
