"""The client's self-watch reads this process's real RSS and CPU time, and loop lateness."""

from __future__ import annotations

import asyncio
import mmap
import time

from loadgen.engine.selfwatch import SelfWatch, cpu_seconds, rss_bytes


def test_rss_is_the_current_resident_size_not_the_peak() -> None:
    # A fresh anonymous mapping, not a bytearray: the allocator may hand a bytearray pages
    # still resident from an earlier test (507 MB resident, then +0 after touching 64 MiB).
    block = mmap.mmap(-1, 64 * 2**20)
    before = rss_bytes()
    for page in range(0, len(block), mmap.PAGESIZE):  # resident only once touched
        block[page] = 1
    grown = rss_bytes()
    block.close()
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
