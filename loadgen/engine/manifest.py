"""run.json's opening fields, the same for every command that writes a run directory: what ran
(the resolved scenario, or a synthesized one for a scenario-less command), with which seed, when,
where and by which loadgen. `loadgen report` and `compare` read one shape, whoever wrote it."""

from __future__ import annotations

import datetime as dt
import hashlib
import platform
from pathlib import Path

from loadgen import __version__
from loadgen.clock import ClockName
from loadgen.engine.seeds import RunSeed
from loadgen.run_manifest import ProfileRef, RunManifest
from loadgen.scenario.model import Scenario, scenario_to_json
from loadgen.sim.profile_file import is_profile_path, load_profile_file


def manifest_head(
    scenario: Scenario,
    seed: RunSeed,
    started: dt.datetime,
    slo: dict[str, float] | None,
    clock: ClockName,
    shares: dict[str, float] | None = None,
    percentiles: tuple[float, ...] | None = None,
) -> RunManifest:
    """run.json's head; `slo_shares` only where --slo gave shares (a scenario's SLO takes p90),
    `metric_percentiles` only where --metric-percentiles asked."""
    return RunManifest(
        tool_version=__version__,
        scenario=scenario_to_json(scenario),
        seed=seed.value,
        seed_source=seed.source,
        started_wall=started.isoformat(),
        host=platform.node(),
        python=platform.python_version(),
        slo=slo or None,
        slo_shares=shares or None,
        metric_percentiles=percentiles or None,
        sim_profile=_profile_file(scenario),
        clock=clock,
    )


def profile_ref(ref: str) -> ProfileRef:
    """A profile file by path (as given), name and content digest (a file can be refitted in
    place; the digest says which fit ran)."""
    path = Path(ref)
    return ProfileRef(ref, load_profile_file(path).name,
                      hashlib.sha256(path.read_bytes()).hexdigest())  # fmt: skip


def _profile_file(scenario: Scenario) -> ProfileRef | None:
    """The fitted sim profile a run used; None for a built-in profile."""
    ref = scenario.sim.profile if scenario.sim is not None else None
    if ref is None or not is_profile_path(ref):
        return None
    return profile_ref(ref)
