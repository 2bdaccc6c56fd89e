"""Streams split across worker processes, each with its own uvloop, records merged in order.

A process's event loop is one core: past some tens of thousands of events per second its own
lag becomes the error of every timestamp (selferror.py). Workers take disjoint slices of the
requests and the concurrency; every worker stamps with perf_counter_ns, which on Linux is
CLOCK_MONOTONIC and so shared by every process on the host, against the parent's run start.
Each record is sent to the parent the moment its stream ends, and the parent writes it then:
Ctrl-C or a worker's crash loses no completed record (a crashed worker's in-flight streams
are the only ones missing, and the parent says so).
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import queue as queue_mod
import signal
from collections.abc import Callable, Sequence
from typing import Any

import uvloop

from loadgen.client.openai import OpenAIClient
from loadgen.client.target import Timeouts
from loadgen.engine.executor import run_closed_loop
from loadgen.records import StreamRecord
from loadgen.request import StreamRequest

_DONE = "done"


def split(items: Sequence[Any], n: int) -> list[list[Any]]:
    """`items` dealt round-robin into n slices (every slice non-empty when len >= n)."""
    return [list(items[i::n]) for i in range(n) if items[i::n]]


def _worker(
    base_url: str,
    api_key: str | None,
    requests: list[StreamRequest],
    concurrency: int,
    timeouts: Timeouts,
    run_start_ns: int,
    out: Any,
    start: Any,
) -> None:
    async def main() -> None:
        async with OpenAIClient(
            base_url, api_key=api_key, concurrency=concurrency, timeouts=timeouts
        ) as client:
            await client.warm(min(concurrency, len(requests)))
            # Start together: a worker still importing would steal the core of one streaming.
            await asyncio.to_thread(start.wait)
            client.run_start_ns = run_start_ns
            try:
                await run_closed_loop(
                    requests,
                    client,
                    lambda rec: out.put(rec.to_json()),
                    concurrency=concurrency,
                    run_start_ns=run_start_ns,
                )
            finally:
                for rec in client.take_cancelled():
                    out.put(rec.to_json())

    try:
        uvloop.run(main())
    except KeyboardInterrupt:
        pass  # the parent's Ctrl-C reaches the whole process group; records are already sent
    finally:
        out.put(_DONE)


async def run_in_workers(
    requests: Sequence[StreamRequest],
    *,
    workers: int,
    base_url: str,
    api_key: str | None,
    concurrency: int,
    timeouts: Timeouts,
    run_start_ns: int,
    on_record: Callable[[StreamRecord], None],
) -> list[str]:
    """Runs `requests` closed-loop in `workers` processes (concurrency split alike); calls
    `on_record` in this process as each record arrives. Returns one line per worker that
    died without finishing (empty when all finished)."""
    ctx = mp.get_context("spawn")  # no fork of a process with a running event loop
    out = ctx.Queue()
    slices = split(list(requests), workers)
    n = len(slices)
    start = ctx.Barrier(n)
    procs = [
        ctx.Process(
            target=_worker,
            args=(
                base_url,
                api_key,
                part,
                _share(concurrency, n, i),
                timeouts,
                run_start_ns,
                out,
                start,
            ),
            daemon=True,
        )
        for i, part in enumerate(slices)
    ]
    for p in procs:
        p.start()
    finished = 0
    try:
        while finished < n:
            item = await asyncio.to_thread(_next, out, procs)
            if item is None:
                break  # every worker gone: whatever they sent has been read
            if item == _DONE:
                finished += 1
            else:
                on_record(StreamRecord.from_json(item))
    except asyncio.CancelledError:
        for p in procs:  # a SIGTERM reached only this process: stop the workers as Ctrl-C does
            if p.is_alive() and p.pid is not None:
                os.kill(p.pid, signal.SIGINT)
        raise
    finally:
        # Cancelled (Ctrl-C) or done: keep reading until the workers have gone, so a record
        # a worker completed or cancelled on its way out is still written.
        while finished < n and (item := _next(out, procs)) is not None:
            if item == _DONE:
                finished += 1
            else:
                on_record(StreamRecord.from_json(item))
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.terminate()
    return [
        f"worker {i} exited with code {p.exitcode} before finishing"
        for i, p in enumerate(procs)
        if p.exitcode not in (0, None)
    ]


def _share(concurrency: int, n: int, i: int) -> int:
    return max(1, concurrency // n + (i < concurrency % n))


def _next(out: Any, procs: list) -> Any:
    """The next item a worker sent, or None once none is alive and nothing is left."""
    while True:
        try:
            return out.get(True, 0.2)
        except queue_mod.Empty:
            if not any(p.is_alive() for p in procs):
                try:
                    return out.get_nowait()
                except queue_mod.Empty:
                    return None
