"""How a run is asked for: the options every arm of it shares, whichever clock drives it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from loadgen.analysis.precision import PrecisionTarget
from loadgen.client.routing import RouteSpec
from loadgen.clock import ClockName
from loadgen.engine.live_metrics import LiveMetrics
from loadgen.engine.soak import SoakStop
from loadgen.server.spec import ServerSpec


@dataclass(frozen=True, slots=True)
class RunOptions:
    base_url: str | None = None
    api_key: str | None = None
    model: str | None = None
    out_root: Path = Path("runs")
    run_seed: int | None = None
    progress: bool = True
    block_size: int | None = None
    # Limits of an external server that loadgen did not launch but someone else did (the
    # launcher's ServerFacts), with each fact's source ("flags", "boot_log", ...); a fact
    # without a source entry is labelled "flags".
    server_facts: dict[str, int] | None = None
    server_facts_sources: dict[str, str] | None = None
    # Soaks: when to stop sending (deadline, server gone), and the client's self-watch
    # (client.jsonl).
    stop: SoakStop | None = None
    self_watch: bool = False
    # SLOs from `--slo`; each field overrides the scenario's `slo` of the same name.
    slo: dict[str, float] | None = None
    # The share of streams each `--slo` item must hold for (its pNN), by the same names.
    slo_shares: dict[str, float] | None = None
    # WALL: the sim (or a server) over HTTP in real time; VIRTUAL: the sim's engine on a
    # discrete-event clock, no HTTP (loadgen/engine/virtual_run.py).
    clock: ClockName = ClockName.WALL
    # Where run_seed came from (engine/seeds.py: "fresh", "user", "replay:<dir>").
    seed_source: str | None = None
    # The launch flags of an external server, as the user gave them (server/user_facts.py).
    server_flags: tuple[str, ...] = ()
    # An external server's log file, read from where it stood when the run began.
    server_log: Path | None = None
    # The server loadgen launches per boot (None: the built-in sim), and the seed that shuffles
    # each round of boots (None: the arms in declared order, A B C A B C).
    server: ServerSpec | None = None
    boot_order_seed: int | None = None
    # Client processes that send the measured streams (None: auto, engine/spread.py).
    workers: int | None = None
    # Send them from Ray actors on the cluster at this address instead (client/ray_pool.py).
    ray_address: str | None = None
    # GPU telemetry: a DCGM exporter's /metrics URL, else NVML where the target is on this host
    # unless `telemetry` is off (engine/telemetry.py).
    telemetry_url: str | None = None
    telemetry: bool = True
    # Several replicas behind the client's router (client/routing.py): every --base-url when
    # more than one is given (base_url is the first), or the built-in sim booted N times
    # (--sim-replicas, either clock); `route` picks each request's replica.
    replica_urls: tuple[str, ...] = ()
    sim_replicas: int = 1
    route: RouteSpec = RouteSpec()  # noqa: RUF009 - frozen, so one shared default is safe

    # `--metric-percentiles`: TTFT/TPOT/ITL/E2E at these percentiles in every summary (run.json
    # keeps them, so a re-report gives the same); None: not asked.
    metric_percentiles: tuple[float, ...] | None = None
    # `--until-precise`: send until each target percentile's confidence interval is within its
    # margin (engine/precise.py), the plan's requests at most; () sends the whole plan.
    until_precise: tuple[PrecisionTarget, ...] = ()
    # A soak's `--until-precise`: each of its windows closes once these are within their
    # margins (analysis/soak.py cuts them from the records); kept in run.json, never a stop.
    soak_precise: tuple[PrecisionTarget, ...] = ()
    # Watching a run from outside: loadgen's own /metrics on 127.0.0.1:metrics_port while it
    # runs (`live`: its figures, set by the engine while serving them), and a W3C traceparent
    # header on every request (recorded per stream).
    metrics_port: int | None = None
    live: LiveMetrics | None = None
    trace_context: bool = False

    def on_virtual_sim(self) -> RunOptions:
        """These options on the virtual clock's built-in sim: no URL and no launched server, and
        the sim's own model name (the real server's --model is not its)."""
        return replace(self, clock=ClockName.VIRTUAL, base_url=None, server=None, model=None)

    @property
    def replicas(self) -> int:
        return max(len(self.replica_urls), self.sim_replicas)
