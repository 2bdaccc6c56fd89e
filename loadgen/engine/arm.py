"""One arm's phases, written once for both clocks.

Warmups one at a time; then per rep: prime and verify the cached prefixes, send the measured
requests on the rep's schedule; stop where a soak says so (its deadline, the server gone, the
plan exhausted) or `--until-precise` does (engine/precise.py); at the end, the closing scrape,
the records of streams cut short and the manifest. What a clock changes sits behind
`ArmBackend`: the HTTP backend
(engine/http_backend.py: the client, its pools, the poller on wall time) and the virtual one
(engine/virtual_run.py: the sim's engine on its event clock). A phase added here runs on
both, and cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import aiohttp

from loadgen.client.errors import ClientError
from loadgen.engine.materialize import materialize
from loadgen.engine.options import RunOptions
from loadgen.engine.poller import MetricsPoller
from loadgen.engine.precise import PreciseStop
from loadgen.engine.primes import prime_rep
from loadgen.engine.progress import ArmProgress
from loadgen.engine.soak import SoakStop
from loadgen.engine.target import Target
from loadgen.records import RecordSink, RunDirectory, StreamRecord
from loadgen.request import StreamRequest
from loadgen.run_manifest import BackendPart, CacheCheck, RunManifest, TargetPart
from loadgen.scenario.plan import ArmPlan, RepPlan
from loadgen.scenario.prompts import PromptBuilder

# What a server gone away raises on the wall clock: a soak ends on it (its report follows), a
# run raises it.
SERVER_GONE = (ClientError, OSError, aiohttp.ClientError)


@dataclass(frozen=True, slots=True)
class ArmOpening:
    """What a clock's backend opens for an arm with (engine/backends.py's OpenBackend): the
    arm, its run directory, the options, warn, the sweep boot's target (None: the backend
    reaches its own) and `reached`, which hears the target's part of run.json before anything
    is sent."""

    arm: ArmPlan
    rundir: RunDirectory
    opts: RunOptions
    warn: Callable[[str], None]
    target: Target | None
    reached: Callable[[TargetPart], None]


class ArmBackend(Protocol):
    """A clock and a way to send: what the arm's phases need of either."""

    target: Target
    model: str
    builder: PromptBuilder
    poller: MetricsPoller

    @property
    def progress(self) -> ArmProgress:
        """Read-only, so each backend may keep its own kind of progress view."""
        ...

    @property
    def speed(self) -> float:
        """The server's speed (a sim's; 1 for a real server): a soak's duration is its time."""
        ...

    def now_ns(self) -> int:
        """The run clock: ns since the arm's start."""
        ...

    async def send_now(self, req: StreamRequest) -> StreamRecord:
        """Sends `req` now, alone, and returns its record."""
        ...

    async def run_rep(
        self, rep: RepPlan, record: RecordSink, stop: Callable[[], bool] | None
    ) -> None:
        """A rep's measured requests (and session turns) on their schedule, each recorded."""
        ...

    async def finish(self) -> list[StreamRecord]:
        """Stops the background work and takes the closing sample; returns the records of
        streams the stop cut short."""
        ...

    def describe(self) -> tuple[TargetPart, BackendPart]:
        """run.json's parts the backend owns, as they stand at the end."""
        ...


async def drive_arm(
    arm: ArmPlan,
    backend: ArmBackend,
    rundir: RunDirectory,
    manifest: RunManifest,
    stop: SoakStop | None,
    keep: Callable[[RunManifest], None],
    precise: PreciseStop | None = None,
) -> None:
    """Every phase of `arm` on `backend`, recorded into `rundir`; `keep` hears the manifest as
    it gains the served model, the arm's cache checks and, at the end, what the backend, the
    soak's stop and `--until-precise` have to say. A rep whose primed prefix the cache never
    hit is not measured, and its streams leave the plan's count."""
    progress = backend.progress

    def record(rec: StreamRecord, line: bytes | None = None) -> None:
        rundir.append_stream(rec, line)
        progress.done(rec)
        if stop is not None:
            stop.see(rec)
        if precise is not None:
            precise.see(rec)

    manifest = manifest.add(
        *backend.describe(),
        model=backend.model,
        token_counter=backend.builder.counter.method,
        prompt_shapes={g.name: g.prompt.shape for g in arm.scenario.groups},
    )
    keep(manifest)
    checks: list[CacheCheck] = []
    if stop is not None:
        stop.start(backend.speed, backend.now_ns)
    try:
        with progress:
            await _phases(arm, backend, checks, record, stop, _halt(stop, precise))
    finally:
        for rec in await backend.finish():
            record(rec)
        planned = manifest.planned_streams
        dead = {c.rep for c in checks if c.verdict == "dead"}
        unmeasured = sum(len(rep.requests) for rep in arm.reps if rep.rep in dead)
        manifest = manifest.add(
            *backend.describe(),
            planned_streams=None if planned is None else planned - unmeasured,
            cache_checks=tuple(checks),
            soak_end=None if stop is None else stop.end(),
            until_precise=None if precise is None else precise.result(),
        )
        keep(manifest)


def _halt(stop: SoakStop | None, precise: PreciseStop | None) -> Callable[[], bool] | None:
    """Whether to send no more: the soak's stop or `--until-precise` says so (None: neither
    is asked)."""
    stops = [s.stopped for s in (stop, precise) if s is not None]
    if not stops:
        return None
    return lambda: any(stopped() for stopped in stops)


async def _phases(
    arm: ArmPlan,
    backend: ArmBackend,
    checks: list[CacheCheck],
    record: RecordSink,
    stop: SoakStop | None,
    halt: Callable[[], bool] | None,
) -> None:
    b = backend
    for warm in arm.warmup:
        req = await materialize(warm, b.builder, model=b.model, t_intended_ns=b.now_ns())
        record(await b.send_now(req))
    for rep in arm.reps:
        if halt is not None and halt():
            return
        try:
            checked = await prime_rep(rep, b.builder, b.send_now, b.poller, b.model, b.target,
                                      record)  # fmt: skip
            checks += checked
            if any(c.verdict == "dead" for c in checked):
                # A primed prefix that never hit: the rep's "cached" figures would be cold ones
                # (seed 000's dead boot). Reported as such (run.json's check), not measured,
                # so not planned either (drive_arm): no stream of it is missing.
                continue
            # Samples at the rep's edges, so a counter's delta over the measured requests holds
            # no warmup's or prime's (analysis/added_ttft.py: the server's TTFT histogram).
            await b.poller.scrape_once()
            await b.run_rep(rep, record, halt)
            await b.poller.scrape_once()
        except SERVER_GONE as exc:
            if stop is None:
                raise
            stop.server_gone(f"{type(exc).__name__}: {exc}")
    if stop is not None:
        stop.plan_exhausted()
