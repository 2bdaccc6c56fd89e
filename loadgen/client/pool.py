"""A run's streams split across worker processes, each with its own uvloop, records merged.

A process's event loop is one core: past some tens of thousands of events per second its own
lag becomes the error of every timestamp (analysis/selferror.py). A pool of workers takes
disjoint slices of each rep's requests (and of a closed loop's concurrency); everything else
(prompts, primes, the metrics poller, the run directory) stays in the parent, so the run
directory is the one a single process would have written.

Clocks: every worker stamps with perf_counter_ns, which on Linux is CLOCK_MONOTONIC and so
shared by every process on the host; each is handed the parent's run start and its records
come back on the run clock unchanged (clock offset 0 by construction, recorded as such).

No completed record is lost: a worker sends each record to the parent at the end of the loop
turn its stream ended in, and first appends it to its own spill file (that turn's records in
one write, flushed, so they survive the worker being SIGKILLed). When a worker dies, the parent
adds whatever its spill file holds that never reached it. Only a dead worker's in-flight
streams (and those that ended in the turn it was killed in) have no record, and the parent
says so. Each worker has a pipe of its own to the parent: through one queue shared
by all, a worker SIGKILLed in the middle of a put kept the queue's lock, and every other
worker, and so the run, waited for it for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import multiprocessing as mp
import os
import pickle
import platform
import selectors
import signal
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, AsyncExitStack
from dataclasses import dataclass, field
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, cast

import uvloop

from loadgen.client.endpoint import Timeouts
from loadgen.client.errors import ClientError
from loadgen.client.lag import LoopLagMonitor, quiet_collector
from loadgen.client.loops import (
    recorded,
    run_capped_loop,
    run_closed_loop,
    run_open_loop,
    stream_at,
)
from loadgen.client.openai import OpenAIClient
from loadgen.client.routed import RoutedClient
from loadgen.client.routing import Router, RouteSpec
from loadgen.clock import WallClock
from loadgen.codec import to_json
from loadgen.lifeline import die_with
from loadgen.records import (
    JsonlAppender,
    RecordSink,
    StreamRecord,
    install_stop_signals,
    jsonl_line,
    read_jsonl,
    read_stream,
    stream_values,
)
from loadgen.request import StreamRequest

OnRecord = Callable[[StreamRecord], None]
# What a pool's run enters around its workers' traffic (engine/spread.py: the host's load).
Window = AbstractContextManager[object]
# A worker that has not said it is ready by then is reported as failed to start.
START_TIMEOUT_S = 120.0
# How long a stopping worker gets to send its cancelled records before it is killed.
STOP_GRACE_S = 10.0
# Paced streams one process times within tolerance on this machine kind (bench/client_truth.py:
# flagged at 1,024 streams, clean at 256); the `auto` worker count aims at this per process.
STREAMS_PER_PROCESS = 256
# The parent's longest wait on its workers' pipes before it looks at the deadline again.
_READ_WAIT_S = 0.2


@dataclass(frozen=True, slots=True)
class Job:
    """One rep's share for one worker: an open loop when `concurrency` is None (each request's
    t_intended_ns an offset from the start the pool gives), else a closed loop of that many."""

    requests: tuple[StreamRequest, ...]
    concurrency: int | None = None
    # A closed or capped loop's duration: no send this long after the job's start.
    duration_ns: int | None = None
    # An open loop's seats (its share of the arrival's `concurrency`); None: uncapped.
    cap: int | None = None


def split_jobs(
    requests: Sequence[StreamRequest],
    concurrency: int | None,
    n: int,
    duration_ns: int | None = None,
    cap: int | None = None,
) -> list[Job]:
    """The requests dealt round-robin into at most n jobs (in send order for an open loop, so
    every worker gets an even share of each burst), a closed loop's seats or an open loop's
    `cap` shared alike (at most `cap` jobs then, so the shares never add up past it)."""
    ordered = list(requests)
    if concurrency is None:
        ordered.sort(key=lambda r: r.t_intended_ns)
    n = n if cap is None else min(n, cap)
    slices = [tuple(ordered[i::n]) for i in range(n) if ordered[i::n]]
    seats = [_share(concurrency, len(slices), i) for i in range(len(slices))]
    caps = [_share(cap, len(slices), i) for i in range(len(slices))]
    return [Job(part, k, duration_ns, c) for part, k, c in zip(slices, seats, caps, strict=True)]


def _share(seats: int | None, n: int, i: int) -> int | None:
    return None if seats is None else seat_share(seats, n, i)


def seat_share(concurrency: int, n: int, i: int) -> int:
    """Worker i's part of `concurrency` seats over n workers (at least one each)."""
    return max(1, concurrency // n + (i < concurrency % n))


def auto_workers(peak_in_flight: int, *, server_on_host: bool, cores: int | None = None) -> int:
    """Enough processes that each times at most STREAMS_PER_PROCESS streams, up to the cores
    the client may take (one is left to a server running on the same host)."""
    cores = cores or os.cpu_count() or 1
    usable = max(1, cores - 1) if server_on_host else cores
    return max(1, min(usable, math.ceil(peak_in_flight / STREAMS_PER_PROCESS)))


async def serve_job(
    client: OpenAIClient | RoutedClient, job: Job, start_ns: int, run_start_ns: int, emit: OnRecord
) -> None:
    """Runs one job on `client` from `start_ns` on the run clock (the worker-side core of every
    pool), emitting each record as its stream ends, and the records of streams cancelled
    under it (Ctrl-C) on the way out."""
    clock = WallClock(run_start_ns)
    await clock.sleep_until(start_ns)
    send = stream_at(client)
    try:
        timed = [(start_ns + r.t_intended_ns, r) for r in job.requests]
        if job.cap is not None:
            end = None if job.duration_ns is None else start_ns + job.duration_ns
            await run_capped_loop(timed, send, emit, clock, cap=job.cap, end_ns=end)
        elif job.concurrency is None:
            await run_open_loop(timed, recorded(send, emit), clock)
        else:
            await run_closed_loop(
                job.requests, send, emit, clock, concurrency=job.concurrency,
                duration_ns=job.duration_ns,
            )  # fmt: skip
    finally:
        for rec in client.take_cancelled():
            emit(rec)


@dataclass(frozen=True, slots=True)
class WorkerClient:
    """What every worker of a pool (a process here, a Ray actor in ray_pool.py) streams to and
    with: the server and its key, the timeouts, and the run clock's zero its records are
    stamped against (perf_counter_ns)."""

    base_url: str
    api_key: str | None
    timeouts: Timeouts
    run_start_ns: int
    # Several replicas (the run's targets, in order; base_url is the first): each worker routes
    # its own share with a router of its own (client/routing.py), as client hosts behind no
    # shared router would. Prefix-hash sends each request where one process would; round-robin
    # deals in turn within each worker, so a replica's total is one process's to within a
    # request per worker (exactly it when each worker's share is a multiple of the replicas);
    # least-outstanding balances each worker's own streams.
    replicas: tuple[str, ...] = ()
    route: RouteSpec = field(default_factory=RouteSpec)
    # Per replica (or the one server), its processes where it runs on this host
    # (hostload.local_servers), whose wait for a core each stream's client reads; empty for
    # workers on other hosts (Ray actors) and a server elsewhere.
    server_pids: tuple[tuple[int, ...], ...] = ()


async def open_worker_sender(
    to: WorkerClient, seats: int, stack: AsyncExitStack, *, worker: str | None = None
) -> OpenAIClient | RoutedClient:
    """What a worker streams through, entered on `stack`: a client of the one server, or one
    per replica behind the worker's router, each sized for all `seats` (any policy may send
    every stream to one replica); `worker`: the name its records carry (None: a process of
    this host's pool, which its pipe names)."""
    urls = to.replicas or (to.base_url,)
    clients = [
        await stack.enter_async_context(OpenAIClient(
            url, api_key=to.api_key, concurrency=seats, timeouts=to.timeouts,
            run_start_ns=to.run_start_ns, server_pids=pids,
        ))
        for url, pids in zip(urls, to.server_pids or ((),) * len(urls), strict=True)
    ]  # fmt: skip
    for client in clients:
        client.worker = worker
    if len(clients) == 1:
        return clients[0]
    return RoutedClient(clients, Router(to.route, len(clients)))


Batch = tuple[bytes, list[tuple[Any, ...]]]  # a RecordBatch taken: (lines, values)


@dataclass(slots=True)
class RecordBatch:
    """Finished records on their way from a client worker (a process, or a Ray actor) to the
    parent: their JSON lines, which the parent writes as they are, and their values
    (records.stream_values), from which it makes each record again. Read back from its line, a
    record cost the parent 16 us (records.py); made from its values, 5."""

    lines: list[bytes] = field(default_factory=list)
    values: list[tuple[Any, ...]] = field(default_factory=list)

    def add(self, rec: StreamRecord) -> None:
        self.lines.append(jsonl_line(to_json(rec)))
        self.values.append(stream_values(rec))

    def take(self) -> Batch:
        """What was added, as one payload; the batch is empty again."""
        taken = b"".join(self.lines), self.values
        self.lines, self.values = [], []
        return taken


def joined(batches: Sequence[Batch]) -> Batch:
    """Taken RecordBatches as one, in their order."""
    return b"".join(lines for lines, _ in batches), [v for _, values in batches for v in values]


def hand_on(
    batch: Batch, on_record: RecordSink, fresh: Callable[[StreamRecord], bool] | None = None
) -> None:
    """Hands on the records of a taken RecordBatch (those `fresh` keeps, each asked once) as
    RecordSink takes a batch: the first with the lines of all, the others with b""."""
    lines, values = batch
    recs = [StreamRecord(*vals) for vals in values]
    if fresh is not None:
        kept = [fresh(rec) for rec in recs]
        if not all(kept):
            split = lines.splitlines(keepends=True)
            lines = b"".join(line for line, keep in zip(split, kept, strict=True) if keep)
            recs = [rec for rec, keep in zip(recs, kept, strict=True) if keep]
    for k, rec in enumerate(recs):
        on_record(rec, b"" if k else lines)


@dataclass(frozen=True, slots=True)
class _WorkerArgs:
    index: int
    client: WorkerClient
    seats: int
    spill: str


Message = tuple[str, int, Any]  # (kind, worker index, payload)
# A message on a worker's pipe: the length of its pickle, then the pickle. The two ends are
# loadgen's own: the worker writes without waiting, which multiprocessing's Connection.send
# cannot, and the parent reads many messages a read.
_FRAME_LEN = struct.Struct("<I")
_READ_BYTES = 1 << 16


def _frame(message: Message) -> bytes:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _FRAME_LEN.pack(len(data)) + data


class _Outbox:
    """A worker's messages to the parent over the worker's own pipe. In the event loop a put
    never waits: what a full pipe (a parent busy writing records) does not take is kept and
    written as the pipe makes room. A thread that sent them instead cost a worker ~15% more
    CPU a request, its wake-ups and the GIL passed to and fro (143-147 us against 124-127 at
    16-token answers, 2 workers on 2 cores). Outside the loop (a worker's last messages) a put
    writes everything kept, waiting."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._fd = conn.fileno()
        os.set_blocking(self._fd, False)
        self._kept = bytearray()
        self._room_awaited_on: asyncio.AbstractEventLoop | None = None

    def put(self, message: Message) -> None:
        self._kept += _frame(message)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._write(wait=True)
            return
        if self._room_awaited_on is loop or self._write(wait=False):
            return
        loop.add_writer(self._fd, self._on_room, loop)
        self._room_awaited_on = loop

    def close(self) -> None:
        """Writes what is kept, then closes the pipe: the parent reads its end to the end."""
        if self._room_awaited_on is not None and not self._room_awaited_on.is_closed():
            self._room_awaited_on.remove_writer(self._fd)
        self._write(wait=True)
        self._conn.close()

    def _on_room(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._write(wait=False):
            loop.remove_writer(self._fd)
            self._room_awaited_on = None

    def _write(self, *, wait: bool) -> bool:
        """Writes what is kept, all of it when `wait`; whether nothing is left."""
        if wait:
            os.set_blocking(self._fd, True)
        try:
            while self._kept:
                del self._kept[: os.write(self._fd, self._kept)]
        except BlockingIOError:
            return False
        except OSError:
            self._kept.clear()  # the parent is gone: die_with ends this process
        return True


class _Inbox:
    """The parent's end of a worker's pipe, and what it holds of a message not yet whole."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._held = bytearray()

    def fileno(self) -> int:
        return self.conn.fileno()

    def read(self) -> list[Message] | None:
        """The messages one read of the pipe completes; None at its end (the worker exited, a
        message it was cut off in is dropped)."""
        try:
            data = os.read(self.conn.fileno(), _READ_BYTES)
        except OSError:
            return None
        if not data:
            return None
        held = self._held
        held += data
        out, at = [], 0
        with memoryview(held) as view:
            while len(held) - at >= _FRAME_LEN.size:
                end = at + _FRAME_LEN.size + _FRAME_LEN.unpack_from(held, at)[0]
                if end > len(held):
                    break
                out.append(pickle.loads(view[at + _FRAME_LEN.size : end]))
                at = end
        del held[:at]
        return out


def _worker_main(args: _WorkerArgs, jobs: Any, pipe: Connection) -> None:
    """A worker process: warm its connections, say ready, then serve jobs until told to stop."""
    parent = mp.parent_process()
    if parent is not None and parent.pid is not None:
        die_with(parent.pid)
    out = _Outbox(pipe)
    spill = JsonlAppender(Path(args.spill))
    # Records are spilled and sent once per turn of the loop, however many streams ended in
    # it: a put per record cost a worker 16 us of CPU, a batch of 50 about 6 per record, and a
    # flushed spill write per record was 14% of its profile's samples at 16-token answers.
    unsent = RecordBatch()

    def send_unsent() -> None:
        if unsent.values:
            payload = unsent.take()
            spill.write_lines(payload[0])
            out.put(("recs", args.index, payload))

    def emit(rec: StreamRecord) -> None:
        if not unsent.values:
            asyncio.get_running_loop().call_soon(send_unsent)
        unsent.add(rec)

    async def main() -> None:
        # Ctrl-C reaches the whole process group and the parent may pass a stop on as well:
        # the first signal cancels the job (its cancelled records are still emitted), any
        # later one is ignored, so no second interrupt cuts that short.
        main_task = asyncio.current_task()
        assert main_task is not None
        install_stop_signals(lambda _sig: main_task.cancelling() or main_task.cancel())
        to = args.client
        async with AsyncExitStack() as stack:
            client = await open_worker_sender(to, args.seats, stack)
            await client.warm(args.seats)
            lag = LoopLagMonitor()
            ticker = asyncio.create_task(lag.run())
            out.put(("ready", args.index, {"pid": os.getpid(), "host": platform.node()}))
            while (job := await asyncio.to_thread(jobs.get)) is not None:
                quiet_collector()
                out.put(("loaded", args.index, None))
                if (start_ns := await asyncio.to_thread(jobs.get)) is None:
                    break
                with lag.measuring():
                    await serve_job(client, job, start_ns, to.run_start_ns, emit)
                send_unsent()
                out.put(("done", args.index, lag.summary_ms()))
            ticker.cancel()

    try:
        uvloop.run(main())
    except (KeyboardInterrupt, asyncio.CancelledError):
        pass  # stopped by a signal: every record it completed or cancelled is already sent
    finally:
        send_unsent()
        spill.close()
        out.put(("exit", args.index, None))
        out.close()


class ProcessPool:
    """`size` worker processes streaming as `client` says; an async context manager (workers
    are started and warmed on enter, stopped on exit). `seats` is the most streams any one
    worker will hold at once (its connection pool)."""

    def __init__(self, size: int, client: WorkerClient, *, seats: int, spill_dir: Path) -> None:
        self.size = size
        self._spill_dir = spill_dir
        self._run_start_ns = client.run_start_ns
        ctx = mp.get_context("spawn")  # no fork of a process with a running event loop
        pipes = [ctx.Pipe(duplex=False) for _ in range(size)]
        self._inbox = [_Inbox(read) for read, _ in pipes]
        # Messages read but not yet returned by _next (one read may complete several).
        self._read_ahead: deque[Message] = deque()
        # The pipes of the workers still running, in one poll set made once: multiprocessing's
        # wait() builds a poll set of every pipe per call, 16 us with 15 workers, and the
        # parent waits once per message (a record each, at 256-token answers).
        self._running = selectors.DefaultSelector()
        for i, read in enumerate(self._inbox):
            self._running.register(read, selectors.EVENT_READ, i)
        # The workers' ends, closed here once the workers hold them, so that a worker gone
        # reads as the end of its pipe.
        self._their_ends = [write for _, write in pipes]
        self._jobs = [ctx.Queue() for _ in range(size)]
        self._seen: list[set[tuple[Any, ...]]] = [set() for _ in range(size)]
        # One hand-on at a time: a read cancelled mid-run (Ctrl-C) goes on in its thread while
        # the stop drains and recovers, and a record read by both was handed on twice.
        self._handing = threading.Lock()
        # One reader of the pipes at a time, for the same reason: two threads in one pipe's
        # recv took bytes of one message each, and the stop's drain read a torn pickle.
        self._reading = threading.Lock()
        self._procs = [
            ctx.Process(target=_worker_main,
                        args=(args, self._jobs[args.index], self._their_ends[args.index]),
                        daemon=True)
            for args in (
                _WorkerArgs(i, client, seats, str(spill_dir / f"w{i}.jsonl"))
                for i in range(size)
            )
        ]  # fmt: skip
        self._info: list[dict[str, Any]] = [{} for _ in range(size)]
        self._exited: set[int] = set()
        # Workers whose "exit" came down their pipe: it follows every record they sent, so
        # their spill files hold nothing unsent (reading them back cost the parent 47% of its
        # client-stage CPU at 40,000 records).
        self._said_exit: set[int] = set()
        self._on_record: RecordSink = _unheard  # run()'s, once it is called
        self._reported: set[int] = set()  # workers already said to have died
        # Ids of streams a dead worker's jobs left without any record (run.json's
        # client.streams_without_record): a SIGKILLed worker left 7 of 17 unsent, silently.
        self.unrecorded: list[str] = []

    async def __aenter__(self) -> ProcessPool:
        self._spill_dir.mkdir(parents=True, exist_ok=True)
        for p in self._procs:
            p.start()
        for end in self._their_ends:
            end.close()
        ready: set[int] = set()
        deadline = time.monotonic() + START_TIMEOUT_S
        while len(ready) < self.size:
            item = await asyncio.to_thread(self._next, deadline)
            if item is None or item[0] == "exit":
                await self.__aexit__(None, None, None)
                raise ClientError(f"a client worker process failed to start ({self._status()})")
            kind, index, payload = item
            if kind == "ready":
                ready.add(index)
                self._info[index] = payload
        return self

    async def __aexit__(self, *exc: object) -> None:
        for q in self._jobs:
            q.put(None)
        await asyncio.to_thread(self._drain_until_exit, time.monotonic() + STOP_GRACE_S)
        for p in self._procs:
            p.join(1)
            if p.is_alive():
                p.kill()
                p.join()
        self._recover(set())
        self._running.close()
        for inbox in self._inbox:
            inbox.conn.close()
        if not self._reported:  # every record reached the run directory: no twin kept
            for i in range(self.size):
                (self._spill_dir / f"w{i}.jsonl").unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                self._spill_dir.rmdir()

    @property
    def pids(self) -> list[int]:
        """The workers' process ids (those started)."""
        return [p.pid for p in self._procs if p.pid is not None]

    def manifest(self) -> list[dict[str, Any]]:
        """One entry per worker: where it ran and on which clock."""
        return [
            info | {
                "index": i, "clock": "CLOCK_MONOTONIC, shared with the parent (same host)",
                "clock_offset_ns": 0,
            }
            for i, info in enumerate(self._info)
        ]  # fmt: skip

    async def run(self, jobs: list[Job], on_record: RecordSink, *, lead_ns: int = 0,
                  traffic: Window | None = None) -> list[str]:  # fmt: skip
        """Runs job i on worker i, all starting together `lead_ns` after every worker holds its
        job, calling `on_record` here as each record arrives; returns one line per worker
        that died before finishing (its completed records are kept). `traffic` is entered as
        the jobs start and left as the last ends (handing the jobs out is no part of it)."""
        self._on_record = on_record
        busy = set(range(len(jobs))) - self._exited
        dropped = {i for i in range(len(jobs)) if i in self._exited}
        for i in busy:
            self._jobs[i].put(jobs[i])
        died: set[int] = set()
        try:
            loading = set(busy)
            while loading and (item := await asyncio.to_thread(self._next, None)):
                loading.discard(item[1])
                if item[0] == "exit":
                    died.add(item[1])
            clock = WallClock(self._run_start_ns)
            start_ns = clock.now_ns() + lead_ns
            for i in busy - died:
                self._jobs[i].put(start_ns)
            running = busy - died
            # The window opens at the jobs' start (a timer's tick after it at worst): opened
            # at their hand-out, the lead took a 0.41 s traffic's 14.9 busy cores to 12.5.
            await clock.sleep_until(start_ns)
            with traffic or contextlib.nullcontext():
                while running and (item := await asyncio.to_thread(self._next, None)):
                    kind, index, payload = item
                    running.discard(index)
                    if kind == "exit":
                        died.add(index)
                    elif kind == "done":
                        self._info[index]["loop_lag"] = payload
        except asyncio.CancelledError:
            # Ctrl-C in a terminal reaches every worker; a SIGTERM reached only this process.
            # A worker between jobs is waiting on its queue: the None lets it go.
            for q in self._jobs:
                q.put(None)
            self._signal_workers(signal.SIGTERM)
            await asyncio.to_thread(self._drain_until_exit, time.monotonic() + STOP_GRACE_S)
            raise
        finally:
            lost = self._recover(died | dropped)
            self.unrecorded += self._without_record(jobs, died | dropped)
        return lost

    def _without_record(self, jobs: list[Job], unfinished: set[int]) -> list[str]:
        """The ids of job i's requests with no record, for each worker i in `unfinished`."""
        out = []
        for i in sorted(unfinished & set(range(len(jobs)))):
            seen = {key[0] for key in self._seen[i]}
            out += [r.id for r in jobs[i].requests if r.id not in seen]
        return out

    def _next(self, deadline: float | None) -> Message | None:
        """The next message from a worker, records handed on as they pass; a worker whose
        pipe ends (it exited, or was killed, maybe mid-message) reads as its "exit". None
        once every worker has exited, or at the deadline."""
        while deadline is None or time.monotonic() < deadline:
            with self._reading:
                if self._read_ahead:
                    return self._read_ahead.popleft()
                if len(self._exited) == self.size:
                    return None
                left = _READ_WAIT_S if deadline is None else deadline - time.monotonic()
                for key, _ in self._running.select(max(0.0, min(_READ_WAIT_S, left))):
                    self._take(key.data, cast(_Inbox, key.fileobj).read())
                if self._read_ahead:
                    return self._read_ahead.popleft()
        return None

    def _take(self, i: int, messages: list[Message] | None) -> None:
        """Hands on the records among worker i's `messages` (one read's) as one batch, and keeps
        the others for _next; None: its pipe ended, and everything it sent before it went has
        been read. A parent behind its workers reads more messages a read, so writes fewer
        times a record as it falls behind."""
        if messages is None:
            self._exit(i)
            self._read_ahead.append(("exit", i, None))
            return
        # The records first: an "exit" read with them marks its worker's spill as sent, and a
        # stop's recovery, going on beside a read it cancelled, must find them seen by then.
        batches = [payload for kind, _, payload in messages if kind == "recs"]
        if batches:
            with self._handing:
                hand_on(joined(batches), self._on_record, partial(self._first_time, i))
        for kind, index, payload in messages:
            if kind == "recs":
                continue
            if kind == "exit":
                self._said_exit.add(index)
                self._exit(index)
            self._read_ahead.append((kind, index, payload))

    def _exit(self, i: int) -> None:
        """Worker i has exited: its pipe is read no more."""
        self._exited.add(i)
        self._running.unregister(self._inbox[i])

    def _hand_on(self, index: int, rec: StreamRecord) -> bool:
        """Hands a worker's record on unless it already was (a record both read from the pipe
        and recovered from the spill file); whether it was handed on now."""
        with self._handing:
            if not self._first_time(index, rec):
                return False
            self._on_record(rec)
        return True

    def _first_time(self, index: int, rec: StreamRecord) -> bool:
        """Whether worker `index`'s `rec` is seen here for the first time (it is seen now)."""
        key = _key(rec)
        if key in self._seen[index]:
            return False
        self._seen[index].add(key)
        return True

    def _drain_until_exit(self, deadline: float) -> None:
        while len(self._exited) < self.size and self._next(deadline) is not None:
            pass

    def _signal_workers(self, sig: int) -> None:
        for p in self._procs:
            if p.is_alive() and p.pid is not None:
                os.kill(p.pid, sig)

    def _recover(self, unfinished: set[int]) -> list[str]:
        """Hands on what exited workers spilled but never sent (a SIGKILL can cut a record off
        between the two; a worker that said its exit sent them all); one line per worker in
        `unfinished` (it had a job it did not finish), said once."""
        lines = []
        for i in sorted(self._exited):
            recovered = 0
            if i not in self._said_exit:
                for row in read_jsonl(self._spill_dir / f"w{i}.jsonl"):
                    recovered += self._hand_on(i, read_stream(row))
            if i in unfinished and i not in self._reported:
                self._reported.add(i)
                lines.append(
                    f"client worker {i} (pid {self._procs[i].pid}) stopped with exit code "
                    f"{self._procs[i].exitcode} before finishing its streams; {recovered} "
                    "record(s) recovered from its spill file; its in-flight streams have none"
                )
        return lines

    def _status(self) -> str:
        return ", ".join(f"worker {i}: exit code {p.exitcode}" for i, p in enumerate(self._procs))


def _unheard(rec: StreamRecord, line: bytes | None = None) -> None:
    """A pool's sink before its run gives one: no worker sends a record before its job."""


def _key(rec: StreamRecord) -> tuple[Any, ...]:
    """A record's identity within its worker: its id, phase and when it was meant to go."""
    return rec.id, rec.phase, rec.t_intended_ns, rec.t_sent_ns
