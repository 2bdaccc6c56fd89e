"""`loadgen fidelity` on a target: the scenario on the named server (wall clock: a URL, or a
launched server, `--server sim` the built-in sim with the scenario's own sim block), then on the
virtual clock with the calibrated profile, into RUN/real/ and RUN/virtual/; run.json names
both and the profile as each side ends, so a stopped comparison keeps what ran. With a measured
run given, that recorded run is copied into RUN/real/ (the directory stays whole when the
original moves) and only the prediction runs."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from loadgen.engine.manifest import profile_ref
from loadgen.engine.options import RunOptions
from loadgen.engine.run import Hooks, open_work_root, run_plan
from loadgen.run_manifest import FidelityRun, RunManifest, write_manifest
from loadgen.scenario.model import Scenario
from loadgen.scenario.plan import plan


async def run_fidelity(
    real: Scenario,
    predicted: Scenario,
    profile: Path,
    tolerance: float,
    opts: RunOptions,
    measured: Path | None,
    hooks: Hooks,
) -> Path:
    """Both runs, with one run seed (the same prompts, salts and arrivals), or the measured
    run recorded before and the prediction with its seed; returns RUN."""
    work = open_work_root(real, opts, hooks.on_root, "-fidelity")
    root, started, seed = work.path, work.started, work.seed
    runs = FidelityRun(real.name, tolerance, None, None, profile_ref(str(profile)))
    manifest = RunManifest(
        fidelity=runs, seed=seed, started_wall=started.isoformat(), interrupted=True,
        clock=opts.clock,
    )  # fmt: skip
    write_manifest(root, manifest)
    sides = [("real", real, opts), ("virtual", predicted, opts.on_virtual_sim())]
    if measured is not None:
        hooks.say(f"fidelity: real run of {real.name} recorded in {measured}")
        copy = root / "real" / measured.name
        shutil.copytree(measured, copy)
        runs = dataclasses.replace(runs, real=str(copy.relative_to(root)))
        manifest = manifest.add(fidelity=runs)
        write_manifest(root, manifest)
        sides = sides[1:]
    for side, scenario, side_opts in sides:
        hooks.say(f"fidelity: {side} run of {scenario.name}")
        out = dataclasses.replace(side_opts, out_root=root / side, run_seed=seed)
        run_dir = await run_plan(plan(scenario, run_seed=seed), out, hooks.warn)
        ran = str(run_dir.relative_to(root))
        runs = (
            dataclasses.replace(runs, real=ran)
            if side == "real"
            else dataclasses.replace(runs, virtual=ran)
        )
        manifest = manifest.add(fidelity=runs)
        write_manifest(root, manifest)
    write_manifest(root, manifest.add(interrupted=False))
    return root
