"""The wall clock's arm backend: requests over HTTP from this process's client or its worker
pool to a server given by URL or launched for the arm, with the metrics poller, the loop-lag
monitor, telemetry and the self-watch beside them (engine/arm.py drives its phases)."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, closing, nullcontext, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from loadgen.client.endpoint import Timeouts
from loadgen.client.hostload import HostLoad, local_servers
from loadgen.client.lag import LoopLagMonitor, quiet_collector
from loadgen.client.loops import Backend, stream_at
from loadgen.client.openai import OpenAIClient
from loadgen.client.routed import RoutedClient
from loadgen.client.routing import Router
from loadgen.clock import ClockName, WallClock
from loadgen.engine.arm import ArmOpening
from loadgen.engine.counters import pick_counter
from loadgen.engine.live_metrics import LiveMetrics
from loadgen.engine.materialize import materialize_all
from loadgen.engine.options import RunOptions
from loadgen.engine.poller import MetricsPoller
from loadgen.engine.preflight import checked_model
from loadgen.engine.progress import Progress
from loadgen.engine.replicas import FleetScrape, targets_part
from loadgen.engine.selfwatch import SelfWatch
from loadgen.engine.server_log import ServerLogTail
from loadgen.engine.sessions import build_sessions
from loadgen.engine.spread import (
    Pool,
    client_pids,
    client_pool,
    pool_manifest,
    send_rep_in_pool,
    worker_count,
)
from loadgen.engine.target import Target, open_target
from loadgen.engine.telemetry import open_telemetry
from loadgen.engine.traffic import send_rep
from loadgen.records import (
    JsonlAppender,
    RecordSink,
    RunDirectory,
    StreamRecord,
)
from loadgen.request import StreamRequest, new_traceparent
from loadgen.run_manifest import (
    BackendPart,
    ReplicaTargets,
    ServerLogInfo,
    TargetPart,
    TelemetryInfo,
)
from loadgen.scenario.plan import ArmPlan, RepPlan
from loadgen.scenario.prompts import PromptBuilder
from loadgen.server.bootlog import cache_config_facts

# Sends of a rep are scheduled this far ahead of "now", so the first one is not late by the
# time it takes to create its task.
SCHEDULE_LEAD_NS = 20_000_000


@asynccontextmanager
async def open_wall_backend(o: ArmOpening) -> AsyncIterator[HttpBackend]:
    """HTTP to `o.target` (a sweep's boot) or to the target the options name, started for this
    arm; `o.reached` hears the target before anything is sent."""
    given = nullcontext(o.target) if o.target is not None else None
    async with given or open_target(o.arm, o.opts, log_dir=o.rundir.path, warn=o.warn) as up:
        o.reached(up.part())
        async with open_http_backend(o.arm, up, o.rundir, o.opts, o.warn) as http:
            yield http


@dataclass
class HttpBackend:
    """The wall clock: requests go over HTTP from this process's client or its worker pool,
    with the poller, the loop-lag monitor and the self-watch running beside them."""

    target: Target
    model: str
    builder: PromptBuilder
    session_builder: PromptBuilder
    poller: MetricsPoller
    progress: Progress
    client: OpenAIClient  # the (first) server's: models, tokenize, /metrics of one server
    sender: OpenAIClient | RoutedClient  # what streams go through: the client, or the router
    pool: Pool | None
    lag: LoopLagMonitor
    load: HostLoad
    clock: WallClock  # the run clock: from this arm's start
    warn: Callable[[str], None]
    background: list[asyncio.Task[None]]
    concurrency: int
    workers: int | None  # as asked (None: auto)
    telemetry: TelemetryInfo
    # The run clock's zero on the wall and the host's zone; the replicas, where several.
    run_start_wall_ns: int
    utc_offset_s: int
    targets: ReplicaTargets | None
    log_tail: ServerLogTail | None  # the server's log from the arm's start
    run_dir: Path
    live: LiveMetrics | None  # --metrics-port's figures (None: not served)
    traced: bool  # --trace-context: a fresh traceparent on every request
    kept_log: ServerLogInfo | None = None  # run.json's server_log, once finish() kept it

    @property
    def speed(self) -> float:
        return self.target.speed

    def now_ns(self) -> int:
        return self.clock.now_ns()

    async def send_now(self, req: StreamRequest) -> StreamRecord:
        req = dataclasses.replace(req, t_intended_ns=self.now_ns())
        return await self.sender.stream(with_traceparent(req) if self.traced else req)

    async def run_rep(
        self, rep: RepPlan, record: RecordSink, stop: Callable[[], bool] | None
    ) -> None:
        await _run_rep(
            rep, (self.builder, self.session_builder), self.sender, self.model,
            self.clock, record, self.progress, self.lag, stop,
            pool=self.pool, load=self.load, warn=self.warn, live=self.live, traced=self.traced,
        )  # fmt: skip

    async def finish(self) -> list[StreamRecord]:
        for task in self.background:
            task.cancel()
        for task in self.background:
            with suppress(asyncio.CancelledError):
                await task
        with suppress(Exception):
            await self.poller.scrape_once()  # the closing sample bounds every counter delta
        if self.log_tail is not None:
            self.kept_log = self.log_tail.keep(self.run_dir)
        return self.sender.take_cancelled()

    def describe(self) -> tuple[TargetPart, BackendPart]:
        load = self.load.summary()
        client = self.lag.summary_ms() | {
            "dispatch_late_max_ms": self.progress.max_late_ms,
            "concurrency_pool": self.concurrency,
        } | pool_manifest(self.pool, self.workers)  # fmt: skip
        if load:
            client["host_cpu"] = load
        return self.target.part(), BackendPart(
            ClockName.WALL, client, self.poller.info, self.clock.origin_ns, self.telemetry,
            run_start_wall_ns=self.run_start_wall_ns, utc_offset_s=self.utc_offset_s,
            targets=self.targets, server_log=self.kept_log,
        )  # fmt: skip


@asynccontextmanager
async def open_http_backend(
    arm: ArmPlan,
    target: Target,
    rundir: RunDirectory,
    opts: RunOptions,
    warn: Callable[[str], None],
) -> AsyncIterator[HttpBackend]:
    """The client (and worker pool) for `target`, the prompt sizing, telemetry, the poller with
    its opening sample and the background tasks, ready for the arm's phases."""
    scenario = arm.scenario
    concurrency = max_in_flight(arm)
    timeouts = scenario.timeouts
    run_start_ns = time.perf_counter_ns()
    # The run clock's zero on the wall, to the microsecond, and the zone the host's logs are
    # stamped in: a server's log lines (second stamps in local time) land on the run clock.
    run_start_wall_ns = time.time_ns()
    utc_offset_s = time.localtime().tm_gmtoff
    log_tail = ServerLogTail.start(target.log_path)
    # A soak's stop and --until-precise see every record as it is written, here.
    stops_here = opts.stop is not None or bool(opts.until_precise)
    ray = None if stops_here else opts.ray_address
    workers = worker_count(
        opts.workers, concurrency, server_on_host=target.kind != "external", ray=bool(ray),
        soak=stops_here,
    )  # fmt: skip
    targets = targets_part(target.replicas, opts.route) if target.replicas else None
    servers = _server_pids(target)
    async with OpenAIClient(
        target.url, api_key=opts.api_key, concurrency=concurrency, timeouts=timeouts,
        run_start_ns=run_start_ns, server_pids=servers[0],
    ) as client, client_pool(
        workers, url=target.url, api_key=opts.api_key, peak_in_flight=concurrency,
        timeouts=timeouts, run_start_ns=run_start_ns, run_path=rundir.path,
        ray_address=ray, replicas=target.replicas, route=opts.route, server_pids=servers,
    ) as pool, AsyncExitStack() as stack:  # fmt: skip
        sender = await _sender(
            client, target, opts, stack, concurrency, run_start_ns, timeouts, servers
        )
        wanted = opts.model or scenario.model or target.model
        model, _ = await checked_model(client.get_json("/v1/models"), wanted, target.url)
        counter = await pick_counter(
            client, model, chat=scenario.api == "chat",
            chat_template_kwargs=scenario.chat_template_kwargs, warn=warn,
        )  # fmt: skip
        builder = PromptBuilder(counter)
        # Session messages are sized as content (a chat counter would add a template's tokens).
        session_builder = builder
        if scenario.api == "chat" and any(rep.sessions for rep in arm.reps):
            plain = await pick_counter(
                client, model, chat=False, chat_template_kwargs=None, warn=warn
            )
            session_builder = PromptBuilder(plain)
        notes: list[str] = []
        gpu = await stack.enter_async_context(open_telemetry(
            rundir.path, opts.telemetry_url, target.url, opts.telemetry, notes
        ))  # fmt: skip
        poller = MetricsPoller(
            _metrics_fetch(sender, run_start_ns, rundir),
            rundir.append_metrics,
            interval_s=scenario.metrics.poll_interval_s,
            run_start_ns=run_start_ns,
            warn=warn,
            on_sample=None if gpu is None else gpu.tick,
        )
        lag = LoopLagMonitor()
        if opts.live is not None:
            opts.live.lag_from(lag)
        await poller.scrape_once()  # the opening sample; also reads cache_config_info
        target.learn(cache_config_facts(poller.info.get("cache_config_info", {})), "metrics")
        progress = Progress(arm, poller, enabled=opts.progress, live_counts=sender.live_counts)
        background = [asyncio.create_task(poller.run()), asyncio.create_task(lag.run())]
        if opts.self_watch:
            client_log = stack.enter_context(closing(JsonlAppender(rundir.path / "client.jsonl")))
            watch = SelfWatch(client_log.append, run_start_ns=run_start_ns)
            background.append(asyncio.create_task(watch.run()))
        yield HttpBackend(
            target, model, builder, session_builder, poller, progress, client, sender, pool, lag,
            HostLoad(lambda: client_pids(pool), sorted({p for ps in servers for p in ps})),
            WallClock(run_start_ns),
            warn, background,
            concurrency, opts.workers,
            TelemetryInfo(None if gpu is None else gpu.source, tuple(notes)),
            run_start_wall_ns, utc_offset_s, targets, log_tail, rundir.path, opts.live,
            opts.trace_context,
        )  # fmt: skip


def _server_pids(target: Target) -> list[list[int]]:
    """The processes of each of the target's servers (replica order) that run on this host;
    none for a server elsewhere."""
    urls = [urlsplit(u) for u in target.replicas or [target.url]]
    return local_servers([(u.hostname, u.port) for u in urls])


async def _sender(
    client: OpenAIClient,
    target: Target,
    opts: RunOptions,
    stack: AsyncExitStack,
    concurrency: int,
    run_start_ns: int,
    timeouts: Timeouts,
    servers: Sequence[Sequence[int]],
) -> OpenAIClient | RoutedClient:
    """`client` for one server; for several, a client per replica (the first is `client`)
    behind the run's router, each sized for every stream in flight (any policy may send them
    all to one replica), each reading its replica's `servers` processes' waits."""
    if not target.replicas:
        return client
    others = []
    for url, pids in zip(target.replicas[1:], servers[1:], strict=True):
        other = OpenAIClient(url, api_key=opts.api_key, concurrency=concurrency,
                             timeouts=timeouts, run_start_ns=run_start_ns,
                             server_pids=pids)  # fmt: skip
        others.append(await stack.enter_async_context(other))
    return RoutedClient([client, *others], Router(opts.route, len(target.replicas)))


def _metrics_fetch(
    sender: OpenAIClient | RoutedClient, run_start_ns: int, rundir: RunDirectory
) -> Callable[[], Awaitable[Any]]:
    """/metrics of the one server, or of every replica (their totals; each one's own sample
    to replica_metrics.jsonl), on the run clock."""
    if isinstance(sender, OpenAIClient):
        return lambda: sender.get_text("/metrics")
    fetches = [functools.partial(c.get_text, "/metrics") for c in sender.clients]
    return FleetScrape(fetches, rundir.append_replica_metrics,
                       lambda: time.perf_counter_ns() - run_start_ns)  # fmt: skip


def max_in_flight(arm: ArmPlan) -> int:
    """Connections to open before launch: the most requests any rep can have in flight."""
    sizes = [
        (rep.concurrency or rep.cap or len(rep.requests)) + len(rep.sessions) for rep in arm.reps
    ] or [1]
    return max(max(sizes), 1)


async def _run_rep(
    rep: RepPlan,
    builders: tuple[PromptBuilder, PromptBuilder],
    client: OpenAIClient | RoutedClient,
    model: str,
    clock: WallClock,
    record: RecordSink,
    progress: Progress,
    lag: LoopLagMonitor,
    stop: Callable[[], bool] | None,
    *,
    pool: Pool | None,
    load: HostLoad,
    warn: Callable[[str], None],
    live: LiveMetrics | None,
    traced: bool,
) -> None:
    # Prompts are built before the clock starts: sizing must not eat into the schedule.
    builder, session_builder = builders
    built = await materialize_all(rep.requests, builder, model=model)
    sessions = await build_sessions(rep.sessions, session_builder)
    mine = 0 if pool is not None else min(rep.concurrency or rep.cap or len(built), len(built))
    await client.warm(mine + len(sessions) or 1)
    quiet_collector()
    progress.start_rep(rep)
    sender: Backend = _Traced(client) if traced else client
    sender = sender if live is None else live.watch(sender)
    send = stream_at(progress.watch(sender))
    if live is not None:
        record = live.recording(record)
    with lag.measuring():
        if pool is None:
            with load.measuring():
                await send_rep(rep, built, sessions, send, record, clock, model=model,
                               lead_ns=SCHEDULE_LEAD_NS, stop=stop)  # fmt: skip
            return
        # The pool's workers send the requests; the sessions' turns go from here.
        built = [with_traceparent(r) for r in built] if traced else built
        async with asyncio.TaskGroup() as tg:
            pooled = record if live is None else live.sent_elsewhere(record)
            # The host's load over the workers' traffic alone: handing them 150,000 requests
            # took a 1.2 s window's average from 15.5 busy cores to 10.7.
            tg.create_task(send_rep_in_pool(pool, rep, built, pooled, warn, load.measuring()))
            tg.create_task(send_rep(
                dataclasses.replace(rep, requests=()), [], sessions, send, record, clock,
                model=model, lead_ns=SCHEDULE_LEAD_NS, stop=stop,
            ))  # fmt: skip


def with_traceparent(req: StreamRequest) -> StreamRequest:
    return dataclasses.replace(req, traceparent=new_traceparent())


class _Traced:
    """A backend that sends each request with a fresh W3C traceparent (--trace-context)."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    async def stream(self, req: StreamRequest) -> StreamRecord:
        return await self._backend.stream(with_traceparent(req))
