"""The client watching itself: event-loop lag, CPU time and RSS of this process, appended to
client.jsonl once a second, so a soak can say in which window loadgen itself fell behind and
whether its memory stayed flat. Read from the kernel (/proc/self/statm, getrusage): no psutil.
"""

from __future__ import annotations

import asyncio
import os
import resource
import time
from collections.abc import Callable
from typing import Any

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    """Resident set size now (not the peak that ru_maxrss gives)."""
    with open("/proc/self/statm", "rb") as fh:
        return int(fh.read().split()[1]) * PAGE


def cpu_seconds() -> float:
    """User + system CPU time of this process so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class SelfWatch:
    """Every `every_s`, one sample {t_ns, lag_max_ms, cpu_s, rss_bytes} to `sink`; lag is how
    late the loop woke from `tick_s` sleeps during that second (the worst of them)."""

    def __init__(
        self,
        sink: Callable[[dict[str, Any]], None],
        *,
        run_start_ns: int,
        every_s: float = 1.0,
        tick_s: float = 0.05,
    ) -> None:
        self._sink = sink
        self._start = run_start_ns
        self._every_ns = int(every_s * 1e9)
        self._tick_s = tick_s

    async def run(self) -> None:
        worst = 0.0
        due = time.perf_counter_ns() + self._every_ns
        while True:
            before = time.perf_counter_ns()
            await asyncio.sleep(self._tick_s)
            now = time.perf_counter_ns()
            worst = max(worst, (now - before) / 1e6 - self._tick_s * 1e3)
            if now >= due:
                self._sink(self.sample(now, worst))
                worst, due = 0.0, due + self._every_ns

    def sample(self, now_ns: int, lag_max_ms: float) -> dict[str, Any]:
        return {
            "t_ns": now_ns - self._start,
            "lag_max_ms": round(max(lag_max_ms, 0.0), 3),
            "cpu_s": cpu_seconds(),
            "rss_bytes": rss_bytes(),
        }
