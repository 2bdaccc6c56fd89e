"""Runs a scenario on the virtual clock and keeps the sim's truth beside the run's records."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

from loadgen.analysis.summary import analyze_run
from loadgen.engine import virtual_run
from loadgen.engine.run import RunOptions, run_plan
from loadgen.records import MetricsSample, StreamRecord, read_metrics, read_streams
from loadgen.scenario.load import load_scenario
from loadgen.scenario.plan import plan
from loadgen.sim.virtual import VirtualSim

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

    opts = RunOptions(out_root=out, progress=False, run_seed=seed, clock="virtual")
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
