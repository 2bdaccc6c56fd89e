"""A run's measured streams spread over client worker processes (`loadgen run --workers`).

The parent keeps everything that is not the timing of streams: prompts, warmups, primes and
their cache checks, sessions, the metrics poller and the run directory. Each rep's measured
requests go to the pool (client/pool.py) and their records come back into the same
streams.jsonl, so every later stage reads one run directory, however many processes sent it.
"""

from __future__ import annotations

import math
import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from loadgen.client.endpoint import Timeouts
from loadgen.client.pool import ProcessPool, Window, WorkerClient, auto_workers, split_jobs
from loadgen.client.ray_pool import RayPool, ray_pool
from loadgen.client.routing import RouteSpec
from loadgen.records import RecordSink
from loadgen.request import StreamRequest
from loadgen.scenario.plan import RepPlan

# An open-loop rep's first send leaves this long after every worker holds its share: time to
# take a thousand prompts off the pipe before the clock starts.
POOL_LEAD_NS = 50_000_000


Pool = ProcessPool | RayPool


def worker_count(
    requested: int | None,
    peak_in_flight: int,
    *,
    server_on_host: bool,
    ray: bool = False,
    soak: bool = False,
) -> int | None:
    """The workers a run uses: as asked, or `auto` (None) by the streams it holds at once;
    under Ray, `auto` stays None (the cluster's nodes decide, client/ray_pool.py). A soak's
    stop (deadline, server gone) and --until-precise's are decided in the parent, so their
    streams stay there (1)."""
    if soak:
        return 1
    if requested is not None or ray:
        return requested
    return auto_workers(peak_in_flight, server_on_host=server_on_host)


@asynccontextmanager
async def client_pool(
    workers: int | None,
    *,
    url: str,
    api_key: str | None,
    peak_in_flight: int,
    timeouts: Timeouts,
    run_start_ns: int,
    run_path: Path,
    ray_address: str | None = None,
    replicas: Sequence[str] = (),
    route: RouteSpec | None = None,
    server_pids: Sequence[Sequence[int]] = (),
) -> AsyncIterator[Pool | None]:
    """A pool of `workers` client processes on the run clock, or None for one process (the
    parent's own client sends everything); with `ray_address`, Ray actors on that cluster
    (`workers` None: as many as the cluster's nodes and the streams in flight call for).
    Several `replicas`: each worker process routes its share by `route`. `server_pids`: each
    replica's server processes on this host, whose wait for a core the worker processes read
    around each stream (a Ray actor's host may be another: none there)."""
    local = () if ray_address or not any(server_pids) else tuple(map(tuple, server_pids))
    client = WorkerClient(url, api_key, timeouts, run_start_ns, tuple(replicas),
                          route or RouteSpec(), local)  # fmt: skip
    if ray_address:
        async with ray_pool(ray_address, workers, client, peak_in_flight=peak_in_flight) as pool:
            yield pool
        return
    assert workers is not None
    if workers <= 1:
        yield None
        return
    async with ProcessPool(
        workers, client, seats=math.ceil(peak_in_flight / workers), spill_dir=run_path / "workers"
    ) as pool:
        yield pool


async def send_rep_in_pool(
    pool: Pool,
    rep: RepPlan,
    built: Sequence[StreamRequest],
    record: RecordSink,
    warn: Callable[[str], None],
    traffic: Window | None = None,
) -> None:
    """Sends one rep's measured requests through the pool: a closed loop's seats shared, an
    open loop's schedule (offsets from the rep's start) dealt in send order, its seat cap
    shared too (the cap holds; each arrival waits for a seat of its own worker); `traffic`
    spans the workers' sending (ProcessPool.run)."""
    if rep.concurrency is None:
        offsets = [p.offset_ns or 0 for p in rep.requests]
        built = [replace(req, t_intended_ns=o) for req, o in zip(built, offsets, strict=True)]
    jobs = split_jobs(built, rep.concurrency, pool.size, rep.duration_ns, rep.cap)
    for line in await pool.run(jobs, record, lead_ns=POOL_LEAD_NS, traffic=traffic):
        warn(line)


def client_pids(pool: Pool | None) -> list[int]:
    """The processes on this host that stream: this one and its pool's workers (a Ray pool's
    actors are the cluster's, none of them this host's by right)."""
    return [os.getpid(), *(pool.pids if pool is not None else ())]


def pool_manifest(pool: ProcessPool | RayPool | None, requested: int | None) -> dict[str, Any]:
    """run.json's account of who sent the streams."""
    source = "auto" if requested is None else "user"
    if pool is None:
        return {"workers": 1, "workers_source": source}
    ray = {"ray": pool.run_manifest()} if isinstance(pool, RayPool) else {}
    return (
        {
            "workers": pool.size,
            "workers_source": source,
            "worker_processes": pool.manifest(),
        }
        | ray
        | _unrecorded(pool)
    )


def _unrecorded(pool: ProcessPool | RayPool) -> dict[str, Any]:
    lost = getattr(pool, "unrecorded", None)
    return {"streams_without_record": list(lost)} if lost else {}
