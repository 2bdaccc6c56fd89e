"""`loadgen run --clock virtual`: one arm's plan on the sim's engine, on a discrete-event clock.

The arm's phases are engine/arm.py's, the same as on the wall clock (warmups one at a time,
then per rep: prime and verify cached prefixes, then the measured requests, open or closed
loop); this is the backend they run on here. The same prompts
(sized on the sim's tokenizer, as its /tokenize would), the same records and metrics.jsonl, so
analysis and reports run unchanged. What changes is time: the run clock is VirtualSim's, which
jumps from event to event (an arrival, a step start, a client timeout, a poll instant on the
scenario's poll grid), so the result is exact and repeatable and does not depend on the load
on the machine. The loops are the wall clock's own (client/loops.py, engine/traffic.py): here
they run on `VirtualTime` (loadgen/clock.py), which `VirtualArm.run` moves from event to event,
stepping the sim between; nothing awaits anything real.

The driver lives in engine/ and not in sim/ because it executes a Plan (scenario, prompts,
cache checks, records), which is the engine stage's job; the sim side (loadgen/sim/virtual.py)
stays a server without HTTP and knows nothing of plans.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from prometheus_client.metrics_core import Metric

from loadgen.client.endpoint import Timeouts
from loadgen.client.routing import Router
from loadgen.clock import ClockName, Pending, VirtualTime
from loadgen.engine.arm import ArmOpening
from loadgen.engine.materialize import materialize
from loadgen.engine.options import RunOptions
from loadgen.engine.poller import MetricsPoller
from loadgen.engine.replicas import FleetScrape, targets_part
from loadgen.engine.sessions import build_sessions
from loadgen.engine.target import SIM_MODEL, RunError, Target, sim_settings
from loadgen.engine.traffic import send_rep
from loadgen.engine.virtual_progress import VirtualProgress
from loadgen.records import RecordSink, StreamRecord
from loadgen.request import StreamRequest, intended_at
from loadgen.run_manifest import BackendPart, ReplicaTargets, TargetPart, VirtualEnd
from loadgen.scenario.plan import PlannedRequest, RepPlan
from loadgen.scenario.prompts import PromptBuilder
from loadgen.server.bootlog import cache_config_facts
from loadgen.server.sim import sim_flags
from loadgen.sim.tokenizer import SPECIAL_TOKENS
from loadgen.sim.virtual import (
    NS,
    SettingsError,
    SimServerConfig,
    VirtualFleet,
    VirtualSim,
    config_from_settings,
    sim_facts,
)

VIRTUAL_URL = "virtual://loadgen-sim"
CLIENT_NOTE = (
    "virtual clock: requests went straight from the plan into the sim's engine; no client, "
    "no HTTP, no event loop in the measurement"
)


class SimTokenCounter:
    """Counts a prompt on the sim's own tokenizer, as its /tokenize does (chat: templated).

    Sizing a prompt counts ever shorter cuts of one long text, then maybe that text grown or a
    cut with short fillers appended; the sim tokenizer encodes each pre-split piece alone, so
    only the pieces past the last text encoded are encoded again: a cut at one of its piece
    ends is read from its running totals, and a text sharing a head with it reuses the totals
    up to a piece end safely before where they part (the split reads at most a special token's
    length ahead). A chat template only adds a fixed frame around the content (its pieces end
    at the content's edges). The record's prompt_tokens still come from encoding the prompt
    sent, so a wrong count would show as prompt_tokens != requested_prompt_tokens."""

    method = "local"

    def __init__(
        self, sim: VirtualSim | VirtualFleet, *, chat: bool, template: dict[str, Any] | None
    ) -> None:
        tok = sim.tokenizer
        self._tok = tok
        self._frame = len(sim.prompt_ids("x", chat=chat, template=template)) - tok.count("x")
        self._text = ""
        self._ends: list[int] = []
        self._counts: list[int] = []

    async def count(self, text: str) -> int:
        n = len(text)
        if n and self._text.startswith(text) and text[-1].strip():
            i = bisect.bisect_left(self._ends, n)
            if i < len(self._ends) and self._ends[i] == n:
                return self._frame + self._counts[i]
        # Pieces wholly before this point split the same in both texts.
        keep = bisect.bisect_right(self._ends, _shared_head(self._text, text) - _LOOKAHEAD)
        base = self._ends[keep - 1] if keep else 0
        before = self._counts[keep - 1] if keep else 0
        ends, counts = self._tok.piece_counts(text[base:])
        if keep:
            ends = self._ends[:keep] + [base + e for e in ends]
            counts = self._counts[:keep] + [before + c for c in counts]
        self._text, self._ends, self._counts = text, ends, counts
        return self._frame + (self._counts[-1] if self._counts else 0)


# How far past a piece the tokenizer's split may read: its longest special token.
_LOOKAHEAD = max(map(len, SPECIAL_TOKENS)) + 1


def _shared_head(a: str, b: str) -> int:
    """The length of the longest common prefix of `a` and `b` (bisection on C compares)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


# The loop runs a signal's handler only when the run yields to it, and nothing here awaits
# anything real: a 10 h virtual soak ran 125 s deaf to Ctrl-C and SIGTERM. A yield each
# 50 ms of wall time (one clock read per event) stops a run within a tenth of a second.
YIELD_EVERY_NS = 50_000_000
T = TypeVar("T")


class VirtualArm:
    """One arm on one fresh VirtualSim: the loops' virtual time, its poll grid, and the send
    that hands a request to the sim and returns its record."""

    def __init__(
        self,
        sim: VirtualSim | VirtualFleet,
        poller: MetricsPoller,
        interval_ns: int,
        builder: PromptBuilder,
        model: str,
    ) -> None:
        self.sim, self.poller, self.builder, self.model = sim, poller, builder, model
        self.time = VirtualTime(lambda: sim.now_ns)
        self.interval_ns = max(interval_ns, 1)
        self.next_poll_ns = self.interval_ns
        # Kept across calls: a soak's reps are many short runs, each under 50 ms.
        self._yield_at = time.perf_counter_ns() + YIELD_EVERY_NS

    async def run(self, work: Coroutine[Any, Any, T]) -> T:
        """Runs `work` on virtual time until nothing is due and the server is idle: each
        event in time order, polls before anything else due at the same instant, then the
        loops' timers (one at a time), then the server's own events."""
        sim, clock = self.sim, self.time
        root = clock.start(work)
        try:
            while True:
                if time.perf_counter_ns() >= self._yield_at:
                    await asyncio.sleep(0)  # a stop (cancellation) is raised here
                    self._yield_at = time.perf_counter_ns() + YIELD_EVERY_NS
                clock.run_ready()
                t_timer, t_sim = clock.next_timer_ns(), sim.next_event_ns()
                if t_timer is None and t_sim is None:
                    break
                t = min(x for x in (t_timer, t_sim) if x is not None)
                if self.next_poll_ns <= t:
                    sim.advance_to(self.next_poll_ns)
                    await self.poller.scrape_once()
                    self.next_poll_ns += self.interval_ns
                elif t_timer is not None and t_timer <= t:
                    sim.advance_to(t_timer)
                    clock.wake_next()
                else:
                    sim.step_next()
        finally:
            clock.close()  # what a stop left parked
        if not root.done:
            raise RuntimeError("virtual clock: the work waits on nothing that will happen")
        return cast(T, root.result)

    async def send(self, item: PlannedRequest | StreamRequest, intended_ns: int) -> StreamRecord:
        """Hands `item` to the sim when the clock takes its turn (now, behind any send made
        before it at this instant) and returns its record, which the sim gives when the
        step that ends it is computed: the record's t_done may still lie ahead.

        Each send is an event of its own: the records one step ends are all recorded (and
        seen by a soak's stop) before the first send they free goes in, and the next send of
        a request refused on arrival queues behind those already due at this instant."""
        await self.time.take_turn()
        if isinstance(item, StreamRequest):
            req = intended_at(item, intended_ns)
        else:
            req = await materialize(item, self.builder, model=self.model, t_intended_ns=intended_ns)
        got: Pending[StreamRecord] = self.time.pending()
        self.sim.submit(req, got.set)
        return await got


@dataclass
class VirtualBackend:
    """The virtual clock: requests go straight into one fresh VirtualSim, whose clock jumps
    from event to event; nothing runs beside it."""

    target: Target
    model: str
    builder: PromptBuilder
    session_builder: PromptBuilder
    poller: MetricsPoller
    progress: VirtualProgress
    driver: VirtualArm
    speed: float
    targets: ReplicaTargets | None  # `--sim-replicas` engines behind the run's router

    def now_ns(self) -> int:
        return self.driver.sim.now_ns

    async def send_now(self, req: StreamRequest) -> StreamRecord:
        driver = self.driver
        return await driver.run(driver.send(req, driver.sim.now_ns))

    async def run_rep(
        self, rep: RepPlan, record: RecordSink, stop: Callable[[], bool] | None
    ) -> None:
        sessions = await build_sessions(rep.sessions, self.session_builder)
        d = self.driver
        await d.run(send_rep(rep, rep.requests, sessions, d.send, record, d.time, model=d.model,
                             lead_ns=0, stop=stop))  # fmt: skip

    async def finish(self) -> list[StreamRecord]:
        await self.poller.scrape_once()  # the closing sample bounds every counter delta
        return []  # no stream outlives the run of the clock

    def describe(self) -> tuple[TargetPart, BackendPart]:
        sim = self.driver.sim
        virtual = VirtualEnd(sim.now_ns, sim.engine_steps)
        client = {"in_loop": False, "note": CLIENT_NOTE}
        return self.target.part(), BackendPart(
            ClockName.VIRTUAL, client, self.poller.info, virtual=virtual, targets=self.targets
        )


@asynccontextmanager
async def open_virtual_backend(o: ArmOpening) -> AsyncIterator[VirtualBackend]:
    """A fresh VirtualSim for the arm, its prompt sizing on the sim's tokenizer, the poller on
    its clock with the opening sample taken. `o.target` is the opener's shape (ClockKind): the
    virtual clock runs its own engine, so no boot ever hands it one."""
    arm, rundir, opts, warn, reached = o.arm, o.rundir, o.opts, o.warn, o.reached
    scenario = arm.scenario
    settings = sim_settings(arm)
    try:
        config = config_from_settings(settings)
    except SettingsError as e:
        raise RunError(f"arm {arm.name!r}: {e}") from None
    sim = _virtual_server(config, scenario.timeouts, opts)
    target = Target(
        url=VIRTUAL_URL, kind="sim", model=SIM_MODEL, flags=sim_flags(settings),
        speed=config.speed,
    )  # fmt: skip
    target.learn(sim_facts(config), "sim")
    model = opts.model or scenario.model or SIM_MODEL
    chat = scenario.api == "chat"
    builder = PromptBuilder(SimTokenCounter(sim, chat=chat, template=scenario.chat_template_kwargs))
    # Session messages are sized as content, as on the wall clock.
    session_builder = PromptBuilder(SimTokenCounter(sim, chat=False, template=None))
    fetch: Callable[[], Any] = (
        FleetScrape([metrics_fetch(s) for s in sim.sims], rundir.append_replica_metrics,
                    lambda: sim.now_ns)
        if isinstance(sim, VirtualFleet) else metrics_fetch(sim)
    )  # fmt: skip
    poller = MetricsPoller(
        fetch,
        rundir.append_metrics,
        interval_s=scenario.metrics.poll_interval_s,
        run_start_ns=0,
        warn=warn,
        clock=lambda: sim.now_ns,
    )
    await poller.scrape_once()  # the opening sample; also reads cache_config_info
    target.learn(cache_config_facts(poller.info.get("cache_config_info", {})), "metrics")
    reached(target.part())
    progress = VirtualProgress(
        arm, lambda: sim.now_ns, lambda: sim.in_flight, enabled=opts.progress
    )
    driver = VirtualArm(sim, poller, round(scenario.metrics.poll_interval_s * NS), builder, model)
    yield VirtualBackend(
        target,
        model,
        builder,
        session_builder,
        poller,
        progress,
        driver,
        config.speed,
        _replica_targets(opts),
    )


def _virtual_server(
    config: SimServerConfig, timeouts: Timeouts, opts: RunOptions
) -> VirtualSim | VirtualFleet:
    """One engine, or `--sim-replicas` engines behind the run's router (each its own cache and
    metrics)."""
    n = opts.sim_replicas
    if n == 1:
        return VirtualSim(config, timeouts, model=SIM_MODEL)
    router = Router(opts.route, n)
    sims = [VirtualSim(config, timeouts, model=SIM_MODEL) for _ in range(n)]
    return VirtualFleet(sims, router.pick, router.done)


def _replica_targets(opts: RunOptions) -> ReplicaTargets | None:
    """run.json's `targets` for `--sim-replicas` engines: `virtual://loadgen-sim/<i>`."""
    n = opts.sim_replicas
    if n == 1:
        return None
    return targets_part([f"{VIRTUAL_URL}/{i}" for i in range(n)], opts.route)


def metrics_fetch(sim: VirtualSim) -> Callable[[], Any]:
    """The sim's metric families as its collector has them now: the values /metrics would
    show, without building the text and parsing it back at every poll."""

    async def fetch() -> list[Metric]:
        return sim.metric_families()

    return fetch
