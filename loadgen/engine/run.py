"""`loadgen run`: one scenario, every arm, every rep, into one run directory.

Per arm: start (or reach) the target, open the client, poll metrics and loop lag in the
background, prime and verify cached prefixes, then send each rep's requests on its schedule.
Records stream to disk as they complete; the manifest is rewritten at the end (and on Ctrl-C,
with `interrupted: true`), so a partial run directory is still a readable one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager, closing, nullcontext, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.client.lag import LoopLagMonitor, quiet_collector
from loadgen.client.loops import stream_at
from loadgen.client.openai import OpenAIClient
from loadgen.clock import WallClock
from loadgen.engine.arm import ArmBackend, Record, drive_arm
from loadgen.engine.boots import run_boots
from loadgen.engine.counters import pick_counter
from loadgen.engine.manifest import manifest_head
from loadgen.engine.materialize import materialize
from loadgen.engine.options import RunOptions
from loadgen.engine.poller import MetricsPoller
from loadgen.engine.preflight import (
    check_out_root,
    check_sim_windows,
    check_windows,
    ensure_fd_limit,
    list_models,
    served_window,
)
from loadgen.engine.progress import Progress
from loadgen.engine.seeds import RunSeed
from loadgen.engine.selfwatch import SelfWatch
from loadgen.engine.sessions import build_sessions
from loadgen.engine.spread import Pool, client_pool, pool_manifest, send_rep_in_pool, worker_count
from loadgen.engine.target import Target, open_target, server_spec_for
from loadgen.engine.telemetry import open_telemetry
from loadgen.engine.traffic import send_rep
from loadgen.engine.virtual_progress import planned_streams
from loadgen.engine.virtual_run import open_virtual_backend
from loadgen.records import JsonlAppender, RunDirectory, StreamRecord, write_manifest
from loadgen.request import StreamRequest
from loadgen.scenario.model import Scenario, scenario_to_json
from loadgen.scenario.plan import ArmPlan, Plan, RepPlan
from loadgen.scenario.prompts import PromptBuilder
from loadgen.server.bootlog import cache_config_facts
from loadgen.server.spec import profile_for

# Sends of a rep are scheduled this far ahead of "now", so the first one is not late by the
# time it takes to create its task.
SCHEDULE_LEAD_NS = 20_000_000


def run_dir_name(scenario: Scenario, now: dt.datetime) -> str:
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-{scenario.name}"


@dataclass(frozen=True, slots=True)
class WorkRoot:
    """The directory of a command that runs many runs (capacity, calibrate, fidelity), its start
    and its run seed (--seed, else the scenario's)."""

    path: Path
    started: dt.datetime
    seed: int


def open_work_root(
    scenario: Scenario,
    opts: RunOptions,
    on_root: Callable[[Path], None] | None,
    suffix: str = "",
) -> WorkRoot:
    """Creates the directory under --out; `on_root` hears its path first, so an interrupt
    can name it."""
    check_out_root(opts.out_root)
    started = dt.datetime.now(dt.UTC)
    root = opts.out_root / (run_dir_name(scenario, started) + suffix)
    if on_root is not None:
        on_root(root)
    root.mkdir(parents=True, exist_ok=False)
    seed = scenario.seed if opts.run_seed is None else opts.run_seed
    return WorkRoot(root, started, seed)


async def run_plan(
    plan: Plan,
    opts: RunOptions,
    warn: Callable[[str], None],
    on_root: Callable[[Path], None] | None = None,
) -> Path:
    """Runs every arm of the plan; returns the run directory (the parent one for sweeps).
    `on_root` hears that directory's path before anything is sent (a stopped run's report
    is made from it)."""
    check_out_root(opts.out_root)
    if opts.clock != "virtual":
        # The virtual clock opens no sockets: a 20,000-stream trace replay needs no descriptors.
        ensure_fd_limit(max(_max_in_flight(arm) for arm in plan.arms))
    if opts.base_url:
        listing = await list_models(opts.base_url, opts.api_key, plan.scenario.timeouts.connect_s)
        check_windows(
            plan, served_window(listing, opts.model or plan.scenario.model), opts.base_url
        )
    elif profile_for(server_spec_for(plan.scenario, opts)).configured_by_sim_block:
        check_sim_windows(plan)
    started = dt.datetime.now(dt.UTC)
    root = opts.out_root / run_dir_name(plan.scenario, started)
    if on_root is not None:
        on_root(root)
    single = len(plan.arms) == 1 and not plan.arms[0].flags
    if single:
        await run_arm(plan, plan.arms[0], root, opts, warn)
        return root
    root.mkdir(parents=True, exist_ok=False)
    parent = base_manifest(plan, opts, started) | {
        "arms": [{"name": a.name, "flags": a.flags, "settings": a.settings} for a in plan.arms]
    }
    # The parent of a sweep holds only the manifest: its records live in arms/<arm>/.
    if opts.base_url or opts.clock == "virtual":
        for arm in plan.arms:
            await run_arm(plan, arm, root / "arms" / arm.name, opts, warn)
        write_manifest(root, parent | _unbooted(opts))
        return root

    spec = server_spec_for(plan.scenario, opts)
    deterministic = profile_for(spec).deterministic
    latest: dict[str, Any] = {"interrupted": True}  # until every boot is done

    def on_boot(boots: list[dict[str, Any]], per_arm: int) -> None:
        latest.update(_launched_boots(spec.kind, deterministic, per_arm) | {"boots": boots})
        write_manifest(root, parent | latest)

    async def arm_on_boot(arm: ArmPlan, path: Path, target: Target, boot: dict[str, Any]) -> None:
        await run_arm(plan, arm, path, opts, warn, target=target, boot=boot)

    try:
        await run_boots(plan, root, opts, warn, arm_on_boot, on_boot)
        latest["interrupted"] = False
    finally:
        write_manifest(root, parent | latest)
    return root


def _unbooted(opts: RunOptions) -> dict[str, Any]:
    if opts.clock == "virtual":
        note = "one fresh engine per arm on the virtual clock: exact, one is its floor"
        return {"boots_per_arm": 1, "boots_note": note}
    return {"boots_per_arm": 0, "boots_note": "external server: loadgen restarted nothing"}


def _launched_boots(kind: str, deterministic: bool, per_arm: int) -> dict[str, Any]:
    """Boots per arm, said out loud: a cross-boot comparison is only as good as its floor."""
    if per_arm == 1:
        note = f"one {kind} boot per arm: no boot-to-boot floor, every effect is unresolved"
        if deterministic:
            note += f" (the {kind} is deterministic, so its boots would agree)"
    else:
        note = f"{per_arm} {kind} boots per arm, interleaved; effects are read against the floor"
    return {"boots_per_arm": per_arm, "boots_note": note, "server_kind": kind}


def base_manifest(plan: Plan, opts: RunOptions, started: dt.datetime) -> dict[str, Any]:
    source = opts.seed_source or ("user" if opts.run_seed is not None else "scenario")
    slo = {**(plan.scenario.slo or {}), **(opts.slo or {})}
    return manifest_head(plan.scenario, RunSeed(plan.seed, source), started, slo)


async def run_arm(
    plan: Plan,
    arm: ArmPlan,
    path: Path,
    opts: RunOptions,
    warn: Callable[[str], None],
    *,
    target: Target | None = None,
    boot: dict[str, Any] | None = None,
) -> None:
    """Runs one arm into `path`, on `target` when given (a sweep's boot), else on its own."""
    started = dt.datetime.now(dt.UTC)
    rundir = RunDirectory(path)
    manifest = base_manifest(plan, opts, started) | {
        # What this arm ran: a client-side sweep arm's own settings applied (a load sweep's
        # arrival), not the sweep's base scenario.
        "scenario": scenario_to_json(arm.scenario),
        "arm": {"name": arm.name, "flags": arm.flags, "settings": arm.settings},
        "interrupted": True,  # until the arm completes
        "planned_streams": _planned_streams(arm),
        "cache_checks": [],
    } | ({"boot": boot} if boot else {})  # fmt: skip
    try:
        async with _open_backend(arm, rundir, manifest, opts, warn, target) as backend:
            await drive_arm(arm, backend, rundir, manifest, opts.stop)
        manifest["interrupted"] = False
    except Exception as exc:
        manifest["error"] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise
    finally:
        manifest["finished_wall"] = dt.datetime.now(dt.UTC).isoformat()
        rundir.write_manifest(manifest)
        rundir.close()


@asynccontextmanager
async def _open_backend(
    arm: ArmPlan,
    rundir: RunDirectory,
    manifest: dict[str, Any],
    opts: RunOptions,
    warn: Callable[[str], None],
    target: Target | None,
) -> AsyncIterator[ArmBackend]:
    """The arm's backend: the sim's engine on the virtual clock, else HTTP to `target` (a
    sweep's boot) or to the target the options name, started for this arm."""
    if opts.clock == "virtual":
        async with open_virtual_backend(arm, rundir, manifest, opts, warn) as virtual:
            yield virtual
        return
    given = nullcontext(target) if target is not None else None
    async with given or open_target(arm, opts, log_dir=rundir.path, warn=warn) as reached:
        manifest |= reached.manifest()
        rundir.write_manifest(manifest)
        async with open_http_backend(arm, reached, rundir, manifest, opts, warn) as http:
            yield http


def _planned_streams(arm: ArmPlan) -> int | None:
    """Measured requests the plan holds, session turns included (agent_sessions once read "32
    measured of 0 planned"); None when a duration may end a rep before them all."""
    if any(rep.duration_ns is not None for rep in arm.reps):
        return None
    return planned_streams(arm)


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
    client: OpenAIClient
    pool: Pool | None
    lag: LoopLagMonitor
    clock: WallClock  # the run clock: from this arm's start
    warn: Callable[[str], None]
    background: list[asyncio.Task[None]]
    concurrency: int
    workers: int | None  # as asked (None: auto)

    @property
    def speed(self) -> float:
        return self.target.speed

    def now_ns(self) -> int:
        return self.clock.now_ns()

    async def send_now(self, req: StreamRequest) -> StreamRecord:
        return await self.client.stream(dataclasses.replace(req, t_intended_ns=self.now_ns()))

    async def run_rep(self, rep: RepPlan, record: Record, stop: Callable[[], bool] | None) -> None:
        await _run_rep(
            rep, (self.builder, self.session_builder), self.client, self.model,
            self.clock, record, self.progress, self.lag, stop,
            pool=self.pool, warn=self.warn,
        )  # fmt: skip

    async def finish(self) -> list[StreamRecord]:
        for task in self.background:
            task.cancel()
        for task in self.background:
            with suppress(asyncio.CancelledError):
                await task
        with suppress(Exception):
            await self.poller.scrape_once()  # the closing sample bounds every counter delta
        return self.client.take_cancelled()

    def describe(self) -> dict[str, Any]:
        client = self.lag.summary_ms() | {
            "dispatch_late_max_ms": self.progress.max_late_ms,
            "concurrency_pool": self.concurrency,
        } | pool_manifest(self.pool, self.workers)  # fmt: skip
        return {"client": client, "server_info": self.poller.info} | self.target.manifest()


@asynccontextmanager
async def open_http_backend(
    arm: ArmPlan,
    target: Target,
    rundir: RunDirectory,
    manifest: dict[str, Any],
    opts: RunOptions,
    warn: Callable[[str], None],
) -> AsyncIterator[HttpBackend]:
    """The client (and worker pool) for `target`, the prompt sizing, telemetry, the poller with
    its opening sample and the background tasks, ready for the arm's phases."""
    scenario = arm.scenario
    concurrency = _max_in_flight(arm)
    timeouts = scenario.timeouts
    run_start_ns = time.perf_counter_ns()
    manifest["run_start_perf_ns"] = run_start_ns
    ray = None if opts.stop else opts.ray_address
    workers = worker_count(
        opts.workers, concurrency, server_on_host=target.kind != "external", ray=bool(ray),
        soak=opts.stop is not None,
    )  # fmt: skip
    async with OpenAIClient(
        target.url, api_key=opts.api_key, concurrency=concurrency, timeouts=timeouts,
        run_start_ns=run_start_ns,
    ) as client, client_pool(
        workers, url=target.url, api_key=opts.api_key, peak_in_flight=concurrency,
        timeouts=timeouts, run_start_ns=run_start_ns, run_path=rundir.path,
        ray_address=ray,
    ) as pool, AsyncExitStack() as stack:  # fmt: skip
        model = await _resolve_model(client, opts.model or scenario.model or target.model)
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
        manifest["telemetry"] = {"source": None if gpu is None else gpu.source, "notes": notes}
        poller = MetricsPoller(
            lambda: client.get_text("/metrics"),
            rundir.append_metrics,
            interval_s=scenario.metrics.poll_interval_s,
            run_start_ns=run_start_ns,
            warn=warn,
            on_sample=None if gpu is None else gpu.tick,
        )
        lag = LoopLagMonitor()
        await poller.scrape_once()  # the opening sample; also reads cache_config_info
        target.learn(cache_config_facts(poller.info.get("cache_config_info", {})), "metrics")
        progress = Progress(arm, poller, enabled=opts.progress, live_counts=client.live_counts)
        background = [asyncio.create_task(poller.run()), asyncio.create_task(lag.run())]
        if opts.self_watch:
            client_log = stack.enter_context(closing(JsonlAppender(rundir.path / "client.jsonl")))
            watch = SelfWatch(client_log.append, run_start_ns=run_start_ns)
            background.append(asyncio.create_task(watch.run()))
        yield HttpBackend(
            target, model, builder, session_builder, poller, progress, client, pool, lag,
            WallClock(run_start_ns), warn, background, concurrency, opts.workers,
        )  # fmt: skip


async def _resolve_model(client: OpenAIClient, model: str | None) -> str:
    if model:
        return model
    models = await client.get_json("/v1/models")
    return models["data"][0]["id"]


def _max_in_flight(arm: ArmPlan) -> int:
    """Connections to open before launch: the most requests any rep can have in flight."""
    sizes = [(rep.concurrency or len(rep.requests)) + len(rep.sessions) for rep in arm.reps] or [1]
    return max(max(sizes), 1)


async def _run_rep(
    rep: RepPlan,
    builders: tuple[PromptBuilder, PromptBuilder],
    client: OpenAIClient,
    model: str,
    clock: WallClock,
    record: Callable[[StreamRecord], None],
    progress: Progress,
    lag: LoopLagMonitor,
    stop: Callable[[], bool] | None,
    *,
    pool: Pool | None,
    warn: Callable[[str], None],
) -> None:
    # Prompts are built before the clock starts: sizing must not eat into the schedule.
    builder, session_builder = builders
    built = [await materialize(p, builder, model=model, t_intended_ns=0) for p in rep.requests]
    sessions = await build_sessions(rep.sessions, session_builder)
    mine = 0 if pool is not None else min(rep.concurrency or len(built), len(built))
    await client.warm(mine + len(sessions) or 1)
    quiet_collector()
    progress.start_rep(rep, built)
    send = stream_at(progress.watch(client))
    with lag.measuring():
        if pool is None:
            await send_rep(rep, built, sessions, send, record, clock, model=model,
                           lead_ns=SCHEDULE_LEAD_NS, stop=stop)  # fmt: skip
            return
        # The pool's workers send the requests; the sessions' turns go from here.
        async with asyncio.TaskGroup() as tg:
            tg.create_task(send_rep_in_pool(pool, rep, built, record, warn))
            tg.create_task(send_rep(
                dataclasses.replace(rep, requests=()), [], sessions, send, record, clock,
                model=model, lead_ns=SCHEDULE_LEAD_NS, stop=stop,
            ))  # fmt: skip
