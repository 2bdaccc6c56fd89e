"""run.json's opening fields, the same for every command that writes a run directory: what ran
(the resolved scenario, or a synthesized one for a scenario-less command), with which seed, when,
where and by which loadgen. `loadgen report` and `compare` read one shape, whoever wrote it."""

from __future__ import annotations

import datetime as dt
import platform
from typing import Any

from loadgen import __version__
from loadgen.engine.seeds import RunSeed
from loadgen.scenario.model import Scenario, scenario_to_json


def manifest_head(
    scenario: Scenario, seed: RunSeed, started: dt.datetime, slo: dict[str, float] | None
) -> dict[str, Any]:
    return {
        "tool_version": __version__,
        "scenario": scenario_to_json(scenario),
        "seed": seed.value,
        "seed_source": seed.source,
        "started_wall": started.isoformat(),
        "host": platform.node(),
        "python": platform.python_version(),
        "slo": slo or None,
    }
