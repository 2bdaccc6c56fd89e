"""`loadgen run`: one scenario, every arm, every rep, into one run directory.

Per arm: start (or reach) the target, open the client, poll metrics and loop lag in the
background, prime and verify cached prefixes, then send each rep's requests on its schedule.
Records stream to disk as they complete; the manifest is rewritten at the end (and on Ctrl-C,
with `interrupted: true`), so a partial run directory is still a readable one.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.engine.arm import ArmOpening, drive_arm
from loadgen.engine.backends import clock_of
from loadgen.engine.boots import run_boots
from loadgen.engine.http_backend import max_in_flight
from loadgen.engine.live_metrics import serving
from loadgen.engine.manifest import manifest_head
from loadgen.engine.options import RunOptions
from loadgen.engine.precise import PreciseStop
from loadgen.engine.preflight import (
    check_named_dir,
    check_out_root,
    check_sim_windows,
    check_windows,
    checked_model,
    ensure_fd_limit,
    fit_datasets,
    list_models,
    served_window,
)
from loadgen.engine.seeds import RunSeed
from loadgen.engine.target import Target, server_spec_for
from loadgen.records import RunDirectory
from loadgen.redact import redact_url
from loadgen.run_manifest import ArmInfo, RunManifest, TargetPart, write_manifest
from loadgen.scenario.limits import sim_window
from loadgen.scenario.model import Scenario, scenario_to_json
from loadgen.scenario.plan import ArmPlan, Plan
from loadgen.server.spec import profile_for


def run_dir_name(scenario: Scenario, now: dt.datetime) -> str:
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-{scenario.name}"


def fresh_dir(out_root: Path, name: str) -> Path:
    """out_root/name made now, or name-2, name-3, ... when a run that started in the same
    second holds it: records append, so two runs sharing a directory would mix their streams
    (two `bench serve --seed 2` runs of 4 streams each read back as one of 8)."""
    out_root.mkdir(parents=True, exist_ok=True)
    n = 1
    while True:
        root = out_root / (name if n == 1 else f"{name}-{n}")
        try:
            root.mkdir()
        except FileExistsError:
            n += 1
        else:
            return root


@dataclass(frozen=True, slots=True)
class Hooks:
    """What a command's work tells as it goes (commands/run.py's execute_work makes them):
    `warn` a problem it goes on past, `on_root` its directory the moment it exists (a stopped
    run's report is made from it), `say` a progress line (a boot's, a point's, a step's)."""

    warn: Callable[[str], None]
    on_root: Callable[[Path], None] | None = None
    say: Callable[[str], None] = lambda _line: None


@dataclass(frozen=True, slots=True)
class WorkRoot:
    """The directory of a command that runs many runs (capacity, calibrate, fidelity), its start
    and its run seed (--seed, else the scenario's)."""

    path: Path
    started: dt.datetime
    seed: int


def open_work_root(
    scenario: Scenario, opts: RunOptions, on_root: Callable[[Path], None] | None, suffix: str = ""
) -> WorkRoot:
    """Creates the directory under --out; `on_root` hears its path first, so an interrupt
    can name it."""
    check_out_root(opts.out_root)
    started = dt.datetime.now(dt.UTC)
    root = fresh_dir(opts.out_root, run_dir_name(scenario, started) + suffix)
    if on_root is not None:
        on_root(root)
    seed = scenario.seed if opts.run_seed is None else opts.run_seed
    return WorkRoot(root, started, seed)


@contextmanager
def watched(opts: RunOptions) -> Iterator[RunOptions]:
    """`opts` with loadgen's own /metrics served for the block when --metrics-port asks, unless
    a caller already serves them (once per command: every arm, boot and search step of it counts
    on the same registry, so no counter resets between them)."""
    if opts.metrics_port is None or opts.live is not None:
        yield opts
        return
    with serving(opts.metrics_port) as live:
        yield dataclasses.replace(opts, live=live)


async def run_plan(
    plan: Plan,
    opts: RunOptions,
    warn: Callable[[str], None],
    on_root: Callable[[Path], None] | None = None,
    *,
    name: str | None = None,
) -> Path:
    """Runs every arm of the plan; returns the run directory (the parent one for sweeps),
    under --out, named `name` (request's --out names the directory itself) or by its start
    and scenario. `on_root` hears that directory's path before anything is sent (a stopped
    run's report is made from it)."""
    with watched(opts) as watching:
        return await _run_plan(plan, watching, warn, on_root, name)


async def _run_plan(
    plan: Plan,
    opts: RunOptions,
    warn: Callable[[str], None],
    on_root: Callable[[Path], None] | None,
    name: str | None,
) -> Path:
    check_out_root(opts.out_root)
    if name is not None:
        check_named_dir(opts.out_root / name)
    clock = clock_of(opts)
    if clock.opens_sockets:
        # A clock without sockets replays a 20,000-stream trace with no descriptors to spare.
        ensure_fd_limit(max(max_in_flight(arm) for arm in plan.arms))
    if opts.base_url:
        listing = list_models(opts.base_url, opts.api_key, plan.scenario.timeouts.connect_s)
        wanted = opts.model or plan.scenario.model
        model, listed = await checked_model(listing, wanted, opts.base_url)
        window = served_window(listed, model)
        plan = fit_datasets(plan, window, redact_url(opts.base_url), warn)
        check_windows(plan, window, opts.base_url)
    elif profile_for(server_spec_for(plan.scenario, opts)).configured_by_sim_block:
        plan = fit_datasets(plan, sim_window(plan.scenario), "the built-in sim", warn)
        check_sim_windows(plan)
    started = dt.datetime.now(dt.UTC)
    if name is None:
        root = fresh_dir(opts.out_root, run_dir_name(plan.scenario, started))
    else:
        root = opts.out_root / name
        root.mkdir(parents=True, exist_ok=True)
    if on_root is not None:
        on_root(root)
    single = len(plan.arms) == 1 and not plan.arms[0].flags
    if single:
        await run_arm(plan, plan.arms[0], root, opts, warn)
        return root
    parent = base_manifest(plan, opts, started).add(arms=tuple(arm_info(a) for a in plan.arms))
    # The parent of a sweep holds only the manifest: its records live in arms/<arm>/.
    # Replicas are booted (or reached) by each arm's own target, as a URL is.
    if opts.base_url or clock.engine_per_arm or opts.replicas > 1:
        per_arm, note = clock.unbooted
        # Said finished only once every arm is: a parent that never said either way was read
        # as unfinished by `fidelity --measured`, and a cut sweep left no parent at all.
        latest = parent.add(boots_per_arm=per_arm, boots_note=note, interrupted=True)
        write_manifest(root, latest)
        try:
            for arm in plan.arms:
                await run_arm(plan, arm, root / "arms" / arm.name, opts, warn)
            latest = latest.add(interrupted=False)
        finally:
            write_manifest(root, latest)
        return root

    spec = server_spec_for(plan.scenario, opts)
    deterministic = profile_for(spec).deterministic
    latest = parent.add(interrupted=True)  # until every boot is done

    def on_boot(boots: list[dict[str, Any]], per_arm: int) -> None:
        nonlocal latest
        note = _launched_boots(spec.kind, deterministic, per_arm)
        latest = latest.add(boots_per_arm=per_arm, boots_note=note, server_kind=spec.kind,
                            boots=tuple(boots))  # fmt: skip
        write_manifest(root, latest)

    async def arm_on_boot(arm: ArmPlan, path: Path, target: Target, boot: dict[str, Any]) -> None:
        await run_arm(plan, arm, path, opts, warn, target=target, boot=boot)

    try:
        await run_boots(plan, root, opts, warn, arm_on_boot, on_boot)
        latest = latest.add(interrupted=False)
    finally:
        write_manifest(root, latest)
    return root


def _launched_boots(kind: str, deterministic: bool, per_arm: int) -> str:
    """Boots per arm, said out loud: a cross-boot comparison is only as good as its floor."""
    if per_arm == 1:
        note = f"one {kind} boot per arm: no boot-to-boot floor, every effect is unresolved"
        if deterministic:
            note += f" (the {kind} is deterministic, so its boots would agree)"
    else:
        note = f"{per_arm} {kind} boots per arm, interleaved; effects are read against the floor"
    return note


def base_manifest(plan: Plan, opts: RunOptions, started: dt.datetime) -> RunManifest:
    source = opts.seed_source or ("user" if opts.run_seed is not None else "scenario")
    slo = {**(plan.scenario.slo or {}), **(opts.slo or {})}
    seed = RunSeed(plan.seed, source)
    head = manifest_head(plan.scenario, seed, started, slo, opts.clock, opts.slo_shares,
                         opts.metric_percentiles)  # fmt: skip
    return head.add(soak_precise=tuple(t.spec for t in opts.soak_precise) or None)


def arm_info(arm: ArmPlan) -> ArmInfo:
    return ArmInfo(arm.name, arm.flags, arm.settings)


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
    with watched(opts) as watching:  # already served by a caller that runs several arms
        await _run_arm(plan, arm, path, watching, warn, target=target, boot=boot)


async def _run_arm(
    plan: Plan,
    arm: ArmPlan,
    path: Path,
    opts: RunOptions,
    warn: Callable[[str], None],
    *,
    target: Target | None,
    boot: dict[str, Any] | None,
) -> None:
    started = dt.datetime.now(dt.UTC)
    rundir = RunDirectory(path)
    manifest = base_manifest(plan, opts, started).add(
        # What this arm ran: a client-side sweep arm's own settings applied (a load sweep's
        # arrival), not the sweep's base scenario.
        scenario=scenario_to_json(arm.scenario),
        arm=arm_info(arm),
        interrupted=True,  # until the arm completes
        planned_streams=None if arm.open_ended else arm.planned_streams,
        cache_checks=(),
        boot=boot or None,
    )

    def keep(grown: RunManifest) -> None:
        """The manifest as it grows, written at once (a crash leaves what was known)."""
        nonlocal manifest
        manifest = grown
        write_manifest(rundir.path, manifest)

    def reached(part: TargetPart) -> None:
        keep(manifest.add(part))  # before anything is sent

    try:
        opened = clock_of(opts).open_backend(ArmOpening(arm, rundir, opts, warn, target, reached))
        async with opened as backend:
            planned = None if arm.open_ended else arm.planned_streams
            precise = PreciseStop(opts.until_precise, planned) if opts.until_precise else None
            await drive_arm(arm, backend, rundir, manifest, opts.stop, keep, precise)
        manifest = manifest.add(interrupted=False)
    except Exception as exc:
        error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        manifest = manifest.add(error=error)
        raise
    finally:
        manifest = manifest.add(finished_wall=dt.datetime.now(dt.UTC).isoformat())
        write_manifest(rundir.path, manifest)
        rundir.close()
