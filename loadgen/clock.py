"""The run clock the send loops run on.

A loop needs three things of time: the instant now, a sleep until an absolute instant, and a
crew of tasks that run beside each other until all are done. `WallClock` is perf_counter_ns
and asyncio.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

Work = Coroutine[Any, Any, None]


class Clock(Protocol):
    def now_ns(self) -> int: ...

    async def sleep_until(self, t_ns: int) -> None:
        """Returns at `t_ns` on this clock, at once if that is not in the future."""
        ...


class Crew(Protocol):
    """Tasks that run beside each other; leaving its `async with` waits for them all."""

    def create_task(self, coro: Work) -> object: ...


class LoopClock(Clock, Protocol):
    def crew(self) -> AbstractAsyncContextManager[Crew]: ...


class WallClock:
    """perf_counter_ns from `origin_ns` (a run's start: the run clock), asyncio's sleeps and
    task groups. Deadlines are absolute, so time spent between sleeps never accumulates."""

    def __init__(self, origin_ns: int = 0) -> None:
        self.origin_ns = origin_ns

    def now_ns(self) -> int:
        return time.perf_counter_ns() - self.origin_ns

    async def sleep_until(self, t_ns: int) -> None:
        delay_ns = self.origin_ns + t_ns - time.perf_counter_ns()
        if delay_ns > 0:
            await asyncio.sleep(delay_ns / 1e9)

    def crew(self) -> asyncio.TaskGroup:
        return asyncio.TaskGroup()
