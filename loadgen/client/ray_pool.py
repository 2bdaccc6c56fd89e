"""Workers as Ray actors spread across a cluster's nodes (`--ray ADDRESS`), records merged here.

Each actor runs an OpenAIClient (several replicas: one per replica behind the actor's own
router, as a worker process does) on its own uvloop (a thread of the actor process) and the
worker-side core `serve_job`; its `run` method is a Ray streaming generator that yields the
records whose streams ended within GATHER_S (5 ms) of the first, so the parent writes a record
at most that and one round trip after its stream ended, and an actor that dies mid-run loses
its in-flight streams and at most those 5 ms of finished ones.

Clocks: every record's t_* are the actor's own perf_counter_ns (CLOCK_MONOTONIC) minus the run
start in that clock, so differences inside a record (TTFT, chunk gaps, decode time) are exact
same-host differences. The run start is handed to each actor in its own clock: the parent's
plus the actor's offset. An actor on the parent's host (same kernel boot id) shares the clock
and gets offset 0; one on another host gets an NTP-style estimate (the minimum-RTT sample of
several round trips), so comparing times ACROSS hosts (timelines, who started first) carries up
to half that RTT of error. The manifest records which, with the offset and the RTT.

Ray is an optional extra: this module imports it only when a pool is made.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import queue
import socket
import threading
import time
from collections.abc import AsyncIterator, Coroutine, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, nullcontext
from time import perf_counter_ns
from typing import Any

import uvloop

from loadgen import __version__
from loadgen.client.lag import quiet_collector
from loadgen.client.pool import (
    STREAMS_PER_PROCESS,
    Batch,
    Job,
    RecordBatch,
    Window,
    WorkerClient,
    hand_on,
    open_worker_sender,
    serve_job,
)
from loadgen.clock import WallClock
from loadgen.messages import one_line
from loadgen.records import RecordSink, StreamRecord

INSTALL_HINT = "pip install 'loadgen[ray]'"
SYNC_ROUND_TRIPS = 8
CONNECT_TIMEOUT_S = 5.0
# Placing actors waits for resources a busy or small cluster may never free: say so, not hang.
PLACE_TIMEOUT_S = 120.0
CLOCK_NOTE = (
    "t_* of each record are on its worker's own clock, shifted to the parent's run clock by "
    "clock_offset_ns: differences inside a record (TTFT, gaps) are exact; across workers on "
    "hosts whose clock is 'estimated', times agree only within offset_rtt_ns / 2"
)
# How long an actor gathers finished records into one reply after the first. Each reply is
# an object the driver's Ray IO thread (`worker.io`) takes in: replied as they came, the
# driver's process ran 1.0-2.2 cores on a 16-core host at 30,000-50,000 requests/s, its IO
# thread beside its event loop; a record reaches the parent this much later at the most.
GATHER_S = 0.005
# How long stopping actors get to send their cancelled streams' records.
STOP_GRACE_S = 10.0


class RayUnavailable(RuntimeError):
    """Ray is not installed, or the cluster could not be reached or used (one-line message)."""


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayUnavailable(f"--ray needs Ray, which is not installed: {INSTALL_HINT}") from None
    return ray


def boot_id() -> str:
    """The kernel's boot id: processes that share it share CLOCK_MONOTONIC."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip()
    except OSError:
        return f"{socket.gethostname()}-unknown-boot"


def min_rtt_offset(samples: list[tuple[int, int, int]]) -> tuple[int, int]:
    """(offset_ns, rtt_ns) from (t_send, t_remote, t_recv) round trips: the sample of least RTT
    bounds the remote reading most tightly; offset = t_remote - midpoint of send and receive."""
    t_send, t_remote, t_recv = min(samples, key=lambda s: s[2] - s[0])
    return t_remote - (t_send + t_recv) // 2, t_recv - t_send


class StreamActor:
    """One worker: what a pool's worker streams through (client/pool.py's open_worker_sender:
    one server's client, or several replicas' behind a router of its own) on a uvloop in its
    own thread. Ray makes it an actor."""

    def __init__(self, client: WorkerClient, seats: int):
        self._loop = uvloop.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="loadgen-uvloop", daemon=True).start()
        # Held for the actor's life: its clients stay open until Ray kills it.
        self._open = AsyncExitStack()
        self.name = f"ray:{_node_ip()}:{os.getpid()}"
        self._client = self._call(open_worker_sender(client, seats, self._open, worker=self.name))
        self._job: Job | None = None
        self._serving: Any = None

    def _call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def identity(self) -> dict[str, Any]:
        return {
            "worker": self.name,
            "host": socket.gethostname(),
            "node_ip": _node_ip(),
            "node_id": _ray().get_runtime_context().get_node_id(),
            "pid": os.getpid(),
            "boot_id": boot_id(),
            "loadgen_version": __version__,
        }

    def now_ns(self) -> int:
        return perf_counter_ns()

    def warm(self, n: int) -> None:
        self._call(self._client.warm(n))

    def load(self, job: Job) -> None:
        """Holds the next job, so a large one is not in transit when the clock starts, and
        quiets the collector before it is timed, as a worker process does."""
        self._job = job
        quiet_collector()

    def run(self, start_ns: int, run_start_ns: int) -> Iterator[Batch]:
        """Serves the loaded job from `start_ns` on the run clock (`run_start_ns` is the run's
        start in this host's clock); yields its records, a taken RecordBatch (client/pool.py)
        of those whose streams have ended at a time, until the job is done."""
        job, self._job = self._job, None
        assert job is not None, "load() a job first"
        self._client.run_start_ns = run_start_ns  # the client stamps every t_* against it
        out: queue.SimpleQueue[StreamRecord | None] = queue.SimpleQueue()

        async def serve() -> None:
            try:
                await serve_job(self._client, job, start_ns, run_start_ns, out.put)
            finally:  # after serve_job's own finally has emitted the cancelled streams
                out.put(None)

        self._serving = asyncio.run_coroutine_threadsafe(serve(), self._loop)
        batch, done = RecordBatch(), False
        while not done:
            # What ends within GATHER_S of the first goes in one reply; None: the job is done.
            for rec in _gathered(out):
                if rec is None:
                    done = True
                else:
                    batch.add(rec)
            if batch.values:
                yield batch.take()
        if not self._serving.cancelled():
            self._serving.result()  # a fault of loadgen's own surfaces in the parent

    def stop(self) -> None:
        """Cancels the running job; its in-flight streams come back as `cancelled` records."""
        if self._serving is not None:
            self._serving.cancel()


def connect(ray: Any, address: str) -> None:
    """This process joins the cluster at `address` as its driver (one-line RayUnavailable)."""
    # Ray retries a dead GCS address for minutes; a TCP connect says so in seconds.
    if (hostport := _host_port(address)) is not None:
        try:
            socket.create_connection(hostport, CONNECT_TIMEOUT_S).close()
        except OSError as exc:
            raise RayUnavailable(
                f"--ray {address}: no Ray head answers there ({one_line(exc)}); start "
                "one with `ray start --head` or pass its address"
            ) from None
    try:
        ray.init(
            address=address,
            log_to_driver=False,
            include_dashboard=False if address == "local" else None,
            logging_level="ERROR",
        )
    except Exception as exc:  # ConnectionError, ValueError, RuntimeError: Ray's own
        raise RayUnavailable(f"--ray {address}: {one_line(exc)}") from None


def cluster_workers(nodes: int, cpus: float, peak_in_flight: int) -> int:
    """`--workers auto` under --ray: one per alive node, more where the streams in flight need
    them (STREAMS_PER_PROCESS each), never more than the cluster's CPUs (one per worker)."""
    want = max(nodes, math.ceil(peak_in_flight / STREAMS_PER_PROCESS))
    return max(1, min(want, int(cpus)))


@asynccontextmanager
async def ray_pool(
    address: str,
    requested: int | None,
    client: WorkerClient,
    *,
    peak_in_flight: int,
) -> AsyncIterator[RayPool]:
    """A RayPool of `requested` workers, or (None: auto) as many as cluster_workers says for
    the cluster at `address`; each holds its share of `peak_in_flight` seats."""
    ray = import_ray()
    connect(ray, address)
    size = requested or cluster_workers(
        sum(n["Alive"] for n in ray.nodes()),
        ray.cluster_resources().get("CPU", 1),
        peak_in_flight,
    )
    async with RayPool(address, size, client, seats=math.ceil(peak_in_flight / size)) as pool:
        yield pool


def _gathered(out: queue.SimpleQueue[StreamRecord | None]) -> Iterator[StreamRecord | None]:
    """The next item of `out` (waiting for it), then every one that comes within GATHER_S of
    it; None (the job is done) ends it."""
    item = out.get()
    deadline = time.monotonic() + GATHER_S
    while item is not None:
        yield item
        left = deadline - time.monotonic()
        try:
            item = out.get(timeout=left) if left > 0 else out.get_nowait()
        except queue.Empty:
            return
    yield None


def _host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of a "host:port" or "ray://host:port" address; None for auto / local."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _ray() -> Any:
    import ray  # present wherever an actor runs

    return ray


def _node_ip() -> str:
    return _ray().util.get_node_ip_address()


@dataclasses.dataclass
class _Placed:
    handle: Any
    identity: dict[str, Any]
    clock: str = "shared"
    offset_ns: int = 0
    rtt_ns: int = 0


class RayPool:
    """`size` StreamActors placed with Ray's SPREAD strategy (one CPU each) on the cluster at
    `address` ("auto", "host:port", "ray://host:port", or "local" for a fresh local instance);
    the same interface as client/pool.py's ProcessPool. Async context manager: actors started,
    clock-synced, warmed (`seats` connections each) and timed on enter, killed on exit."""

    def __init__(self, address: str, size: int, client: WorkerClient, *, seats: int) -> None:
        self.ray = import_ray()
        self.address = address
        self.size = size
        self.run_start_ns = client.run_start_ns
        self._seats = seats
        self._args = (client, seats)
        self._placed: list[_Placed] = []
        self._dead: dict[int, str] = {}  # worker index -> why, once it failed
        self.timing_s: dict[str, float] = {}

    async def __aenter__(self) -> RayPool:
        t0 = perf_counter_ns()
        self._connect()
        t1 = perf_counter_ns()
        try:
            await self._place()
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        t2 = perf_counter_ns()
        for placed in self._placed:
            await self._sync_clock(placed)
        t3 = perf_counter_ns()
        await asyncio.gather(*(p.handle.warm.remote(self._seats) for p in self._placed))
        self.timing_s = {
            "connect_s": (t1 - t0) / 1e9,
            "actors_ready_s": (t2 - t1) / 1e9,
            "clock_sync_s": (t3 - t2) / 1e9,
            "warm_s": (perf_counter_ns() - t3) / 1e9,
        }
        return self

    def _connect(self) -> None:
        if not self.ray.is_initialized():
            connect(self.ray, self.address)

    async def _place(self) -> None:
        actor_cls = self.ray.remote(StreamActor).options(
            scheduling_strategy="SPREAD", num_cpus=1, max_concurrency=4, max_restarts=0
        )
        handles = [actor_cls.remote(*self._args) for _ in range(self.size)]
        self._placed = [_Placed(h, {}) for h in handles]
        try:
            idents = await asyncio.wait_for(
                asyncio.gather(*(h.identity.remote() for h in handles)), PLACE_TIMEOUT_S
            )
        except TimeoutError:
            cpus = self.ray.cluster_resources().get("CPU", 0)
            raise RayUnavailable(
                f"--ray {self.address}: {self.size} workers not placed within "
                f"{PLACE_TIMEOUT_S:.0f} s; each takes 1 CPU and the cluster has {cpus:g}: "
                "pass fewer --workers or add nodes"
            ) from None
        except self.ray.exceptions.RayError as exc:
            raise RayUnavailable(
                f"--ray {self.address}: a worker failed to start ({one_line(exc)}); "
                "every node needs the same loadgen installed"
            ) from None
        for placed, ident in zip(self._placed, idents, strict=True):
            placed.identity = ident
            if ident["loadgen_version"] != __version__:
                raise RayUnavailable(
                    f"--ray {self.address}: worker on {ident['host']} runs loadgen "
                    f"{ident['loadgen_version']}, this is {__version__}: install the same "
                    "version on every node"
                )

    async def _sync_clock(self, placed: _Placed) -> None:
        samples = []
        for _ in range(SYNC_ROUND_TRIPS):
            t_send = perf_counter_ns()
            t_remote = await placed.handle.now_ns.remote()
            samples.append((t_send, t_remote, perf_counter_ns()))
        offset, placed.rtt_ns = min_rtt_offset(samples)
        if placed.identity["boot_id"] == boot_id():
            placed.clock, placed.offset_ns = "shared", 0
            placed.identity["estimated_offset_ns"] = offset  # kept to show the method's error
        else:
            placed.clock, placed.offset_ns = "estimated", offset

    async def __aexit__(self, *exc: object) -> None:
        for placed in self._placed:
            self.ray.kill(placed.handle, no_restart=True)
        self._placed = []
        self.ray.shutdown()

    @property
    def pids(self) -> list[int]:
        """None of this host's by right: the actors are the cluster's (ProcessPool.pids)."""
        return []

    def manifest(self) -> list[dict[str, Any]]:
        """One entry per worker: where it ran and how its clock was related to the parent's."""
        return [
            {
                **p.identity,
                "clock": p.clock,
                "clock_offset_ns": p.offset_ns,
                "offset_rtt_ns": p.rtt_ns,
            }
            for p in self._placed
        ]

    def run_manifest(self) -> dict[str, Any]:
        """run.json's `ray` section: the cluster, every worker, the clock caveat, start-up times."""
        return {
            "address": self.address,
            "workers": self.manifest(),
            "clock_note": CLOCK_NOTE,
            "startup_s": self.timing_s,
        }

    async def run(self, jobs: list[Job], on_record: RecordSink, *, lead_ns: int = 0,
                  traffic: Window | None = None) -> list[str]:  # fmt: skip
        """Job i on worker i, all starting together `lead_ns` after every worker holds its job;
        `on_record` is called here as each record arrives. Returns one line per worker that
        failed, and per job a dead worker could not take (its streams were not sent).
        `traffic` is entered as the jobs start and left as the last ends."""
        problems: list[str] = []
        pairs = []
        for i, job in enumerate(jobs):
            if i in self._dead:
                problems.append(
                    f"worker {self._name(i)} is gone ({self._dead[i]}): its share of "
                    f"{len(job.requests)} streams was not sent"
                )
            else:
                pairs.append((i, job))
        loads = await asyncio.gather(
            *(self._placed[i].handle.load.remote(job) for i, job in pairs), return_exceptions=True
        )
        for (i, _), res in zip(pairs, loads, strict=True):
            if isinstance(res, Exception):
                self._fail(i, res, problems)
        clock = WallClock(self.run_start_ns)
        start_ns = clock.now_ns() + lead_ns
        readers = [
            asyncio.create_task(self._read(i, start_ns, on_record, problems))
            for i, _ in pairs
            if i not in self._dead
        ]
        if not readers:
            return problems
        try:
            # The window opens at the jobs' start, as ProcessPool.run's does.
            await clock.sleep_until(start_ns)
            with traffic or nullcontext():
                await asyncio.wait(readers)  # not gather: cancelling would cancel the readers
        except asyncio.CancelledError:
            # Ctrl-C: the actors cancel their streams and send those records back; keep reading
            # until they have (bounded), so no record already made is lost.
            for i, _ in pairs:
                self._placed[i].handle.stop.remote()
            await asyncio.wait(readers, timeout=STOP_GRACE_S)
            raise
        for reader in readers:
            reader.result()  # a fault of the parent's own (on_record) is not swallowed
        return problems

    async def _read(
        self, i: int, start_ns: int, on_record: RecordSink, problems: list[str]
    ) -> None:
        placed = self._placed[i]
        gen = placed.handle.run.remote(start_ns, self.run_start_ns + placed.offset_ns)
        try:
            async for ref in gen:
                hand_on(await ref, on_record)
        except self.ray.exceptions.RayError as exc:
            self._fail(i, exc, problems)

    def _fail(self, i: int, exc: Exception, problems: list[str]) -> None:
        self._dead[i] = one_line(exc, 200)
        problems.append(
            f"worker {self._name(i)} failed before finishing ({self._dead[i]}); its in-flight "
            "streams have no record"
        )

    def _name(self, i: int) -> str:
        return self._placed[i].identity.get("worker", str(i))
