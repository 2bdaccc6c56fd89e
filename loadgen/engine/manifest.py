"""run.json's opening fields, the same for every command that writes a run directory: what ran
(the resolved scenario, or a synthesized one for a scenario-less command), with which seed, when,
where and by which loadgen. `loadgen report` and `compare` read one shape, whoever wrote it."""

from __future__ import annotations

import datetime as dt
import hashlib
import platform
from pathlib import Path
from typing import Any

from loadgen import __version__
from loadgen.engine.seeds import RunSeed
from loadgen.scenario.model import Scenario, scenario_to_json
from loadgen.sim.profile_file import is_profile_path, load_profile_file


def manifest_head(
    scenario: Scenario,
    seed: RunSeed,
    started: dt.datetime,
    slo: dict[str, float] | None,
    shares: dict[str, float] | None = None,
    percentiles: tuple[float, ...] | None = None,
) -> dict[str, Any]:
    """run.json's head; `slo_shares` only where --slo gave shares (a scenario's SLO takes p90),
    `metric_percentiles` only where --metric-percentiles asked."""
    return (
        _profile_file(scenario)
        | ({"slo_shares": shares} if shares else {})
        | ({"metric_percentiles": list(percentiles)} if percentiles else {})
        | {
            "tool_version": __version__,
            "scenario": scenario_to_json(scenario),
            "seed": seed.value,
            "seed_source": seed.source,
            "started_wall": started.isoformat(),
            "host": platform.node(),
            "python": platform.python_version(),
            "slo": slo or None,
        }
    )


def _profile_file(scenario: Scenario) -> dict[str, Any]:
    """The fitted sim profile a run used, by path, name and content digest (a file can be
    refitted in place; the digest says which fit ran); nothing for a built-in profile."""
    ref = scenario.sim.profile if scenario.sim is not None else None
    if ref is None or not is_profile_path(ref):
        return {}
    path = Path(ref)
    return {"sim_profile": {"path": ref, "name": load_profile_file(path).name,
                            "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}}  # fmt: skip
