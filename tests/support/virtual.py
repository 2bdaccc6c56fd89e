"""Runs a scenario on the virtual clock and keeps the sim's truth beside the run's records."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

from loadgen.analysis.summary import analyze_run
from loadgen.client.endpoint import Timeouts
from loadgen.client.loops import recorded, run_open_loop
from loadgen.clock import ClockName
from loadgen.engine import virtual_run
from loadgen.engine.poller import MetricsPoller
from loadgen.engine.run import RunOptions, run_plan
from loadgen.engine.virtual_run import VirtualArm, metrics_fetch
from loadgen.records import MetricsSample, StreamRecord, read_metrics, read_streams
from loadgen.request import StreamRequest
from loadgen.scenario.load import load_scenario
from loadgen.scenario.plan import plan
from loadgen.sim.server import SimServerConfig
from loadgen.sim.virtual import VirtualSim

MODEL = "loadgen-sim"

NS = 1_000_000_000


@dataclass(frozen=True)
class VirtualRun:
    """One run directory, its analysis, and the truth of every sim the run booted."""

    run_dir: Path
    records: dict[str, StreamRecord]
    truth: dict[str, dict[str, Any]]  # ground-truth rows (run-clock ns) by the client's id
    summary: dict[str, Any]
    metrics: list[MetricsSample]
    sims: list[VirtualSim]

    def verdicts(self, group: str | None = None) -> dict[str, str]:
        return {
            s["id"]: s["verdict"]
            for s in self.summary["streams"]
            if group is None or s["group"] == group
        }

    def stream(self, stream_id: str) -> dict[str, Any]:
        return next(s for s in self.summary["streams"] if s["id"] == stream_id)


def sim_overrides(**settings: Any) -> list[str]:
    """`--set sim.NAME=VALUE` for each setting."""
    return [f"sim.{k}={v}" for k, v in settings.items()]


async def run_virtual(
    scenario: str | Path,
    overrides: list[str],
    out: Path,
    *,
    seed: int | None = None,
    warn: Any = None,
) -> VirtualRun:
    """Runs the scenario with --clock virtual; a single-arm run is analysed as such."""
    sims: list[VirtualSim] = []

    class Recording(VirtualSim):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.prompts: dict[str, str] = {}
            sims.append(self)

        def submit(self, req: Any, on_record: Any) -> None:
            self.prompts[req.id] = req.prompt
            super().submit(req, on_record)

    opts = RunOptions(out_root=out, progress=False, run_seed=seed, clock=ClockName.VIRTUAL)
    with mock.patch.object(virtual_run, "VirtualSim", Recording):
        run_dir = await run_plan(
            plan(load_scenario(scenario, overrides), run_seed=seed), opts, warn=warn or _no_warn
        )
    truth = {
        r["client_request_id"]: r
        for sim in sims
        for r in sim.truth_rows()
        if r["client_request_id"]
    }
    single = (run_dir / "streams.jsonl").is_file()
    return VirtualRun(
        run_dir=run_dir,
        records={r.id: r for r in read_streams(run_dir)} if single else {},
        truth=truth,
        summary=analyze_run(run_dir).summary if single else {},
        metrics=read_metrics(run_dir) if single else [],
        sims=sims,
    )


def _no_warn(message: str) -> None:
    raise AssertionError(f"the run warned: {message}")


@dataclass(frozen=True)
class Driven:
    """Requests sent straight to one VirtualSim at chosen instants: records by id, the metrics
    samples taken on the poll grid, and the sim itself (truth, counters)."""

    records: dict[str, StreamRecord]
    metrics: list[MetricsSample]
    sim: VirtualSim

    def truth(self) -> dict[str, dict[str, Any]]:
        return {r["client_request_id"]: r for r in self.sim.truth_rows()}


async def drive(
    config: SimServerConfig,
    sends: list[tuple[float, StreamRequest]],
    *,
    poll_s: float = 0.05,
    sim: VirtualSim | None = None,
    metrics: list[MetricsSample] | None = None,
) -> Driven:
    """Sends each request at its instant (seconds on the run clock) and runs until all ended;
    pass the `sim` (and `metrics`) of an earlier drive() to go on from where it stopped."""
    sim = sim or VirtualSim(config, Timeouts(), model=MODEL)
    samples = [] if metrics is None else metrics
    poller = MetricsPoller(
        metrics_fetch(sim),
        samples.append,
        interval_s=poll_s,
        run_start_ns=0,
        clock=lambda: sim.now_ns,
    )
    records: dict[str, StreamRecord] = {}
    arm = VirtualArm(sim, poller, round(poll_s * NS), None, MODEL)  # type: ignore[arg-type]
    arm.next_poll_ns = sim.now_ns
    arrivals = [(sim.now_ns + round(t_s * NS), req) for t_s, req in sends]
    keep = recorded(arm.send, lambda rec: records.__setitem__(rec.id, rec))
    await arm.run(run_open_loop(arrivals, keep, arm.time))
    await poller.scrape_once()
    return Driven(records, samples, sim)
