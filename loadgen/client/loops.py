"""Executes a list of requests against a backend: open loop on a schedule, or closed loop.

The executor knows nothing of HTTP: a backend is anything with `async stream(request) ->
StreamRecord` that never raises for server faults (OpenAIClient, or a fake in tests).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, Protocol, TypeVar

from loadgen.records import StreamRecord
from loadgen.request import StreamRequest


class Backend(Protocol):
    async def stream(self, req: StreamRequest) -> StreamRecord: ...


OnRecord = Callable[[StreamRecord], None]
T = TypeVar("T")


class ClosedSeats(Generic[T]):
    """A closed loop's schedule on any clock: `concurrency` seats, each taking the next item
    as its last one ends; none from `end_ns` on (a duration) or once `stop` says so (a soak's
    deadline). The wall clock's loop and the virtual clock's both take their items here: the
    wall clock once ran a 1 s closed-loop duration for 10,000 requests, the virtual one
    stopped at 1 s."""

    def __init__(
        self,
        items: Sequence[T],
        concurrency: int,
        *,
        end_ns: int | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> None:
        self._pending: Iterator[T] = iter(items)
        self._seats = min(concurrency, len(items))
        self._end_ns, self._stop = end_ns, stop

    def first(self, now_ns: int) -> list[T]:
        """The items the seats start with at `now_ns`."""
        firsts = (self.take(now_ns) for _ in range(self._seats))
        return [item for item in firsts if item is not None]

    def take(self, now_ns: int) -> T | None:
        """The next item for a seat free at `now_ns`; None: the seat stays empty."""
        if self._end_ns is not None and now_ns >= self._end_ns:
            return None
        if self._stop is not None and self._stop():
            return None
        return next(self._pending, None)


async def run_open_loop(
    requests: Sequence[StreamRequest],
    backend: Backend,
    on_record: OnRecord,
    *,
    run_start_ns: int,
) -> None:
    """Sends each request at its `t_intended_ns` (run clock), never waiting for earlier
    responses, so a slow server cannot slow the arrival process (no coordinated omission).
    A request that leaves late keeps its intended time; the client records the actual one."""
    ordered = sorted(requests, key=lambda r: r.t_intended_ns)
    async with asyncio.TaskGroup() as tg:
        for req in ordered:
            delay_ns = run_start_ns + req.t_intended_ns - time.perf_counter_ns()
            if delay_ns > 0:
                await asyncio.sleep(delay_ns / 1e9)
            tg.create_task(_stream_and_record(backend, req, on_record))


async def run_closed_loop(
    requests: Sequence[StreamRequest],
    backend: Backend,
    on_record: OnRecord,
    *,
    concurrency: int,
    run_start_ns: int,
    stop: Callable[[], bool] | None = None,
    duration_ns: int | None = None,
) -> None:
    """`concurrency` seats, each sending its next request as soon as its last one ended; the
    intended send is that moment (a closed loop has no schedule to fall behind). No request
    is sent `duration_ns` after the start, nor once `stop` says so; those in flight finish."""

    def now() -> int:
        return time.perf_counter_ns() - run_start_ns

    start = now()
    end = None if duration_ns is None else start + duration_ns
    seats = ClosedSeats(requests, concurrency, end_ns=end, stop=stop)

    async def seat(req: StreamRequest | None) -> None:
        while req is not None:
            picked = dataclasses.replace(req, t_intended_ns=now())
            await _stream_and_record(backend, picked, on_record)
            req = seats.take(now())

    async with asyncio.TaskGroup() as tg:
        for req in seats.first(start):
            tg.create_task(seat(req))


async def _stream_and_record(backend: Backend, req: StreamRequest, on_record: OnRecord) -> None:
    on_record(await backend.stream(req))
