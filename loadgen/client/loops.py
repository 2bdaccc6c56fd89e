"""Executes a list of requests against a backend: open loop on a schedule, or closed loop.

The executor knows nothing of HTTP: a backend is anything with `async stream(request) ->
StreamRecord` that never raises for server faults (OpenAIClient, or a fake in tests).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from loadgen.records import StreamRecord
from loadgen.request import StreamRequest


class Backend(Protocol):
    async def stream(self, req: StreamRequest) -> StreamRecord: ...


OnRecord = Callable[[StreamRecord], None]


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
) -> None:
    """`concurrency` workers, each sending its next request as soon as its last one ended;
    the intended send is that moment (a closed loop has no schedule to fall behind). With
    `stop`, no request is sent once it says so (a soak's deadline); those in flight finish."""
    pending = iter(requests)

    async def worker() -> None:
        for req in pending:
            if stop is not None and stop():
                return
            picked = dataclasses.replace(req, t_intended_ns=time.perf_counter_ns() - run_start_ns)
            await _stream_and_record(backend, picked, on_record)

    async with asyncio.TaskGroup() as tg:
        for _ in range(min(concurrency, len(requests))):
            tg.create_task(worker())


async def _stream_and_record(backend: Backend, req: StreamRequest, on_record: OnRecord) -> None:
    on_record(await backend.stream(req))
