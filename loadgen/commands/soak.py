"""`loadgen soak SCENARIO`: back-to-back traffic for a duration, then the soak report."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from loadgen.clock import ClockName
from loadgen.commands.options import (
    CLOCK_CHOICE,
    OUTPUT_OPTIONS,
    SIM_PROFILE_OPTION,
    TARGET_OPTIONS,
    check_target,
    parse_clock,
    resolved_target,
    with_sim_profile,
)
from loadgen.commands.run import execute, report_run
from loadgen.engine.run import RunOptions
from loadgen.engine.seeds import SEED_TYPE, resolve_run_seed
from loadgen.engine.soak import SoakStop, soak_scenario
from loadgen.scenario.load import ScenarioError, load_scenario
from loadgen.scenario.model import SimConfig, Soak
from loadgen.scenario.plan import plan
from loadgen.scenario.soak_block import parse_duration, parse_window


@click.command("soak")
@click.argument("scenario")
@click.option("--duration", default=None,
              help="How long, on the server's clock: 600, 10m, 1h (default: the scenario's "
                   "soak.duration, else 1h).")  # fmt: skip
@click.option("--window", default=None,
              help="thirds (by request order) or a fixed length like 5m (default: the "
                   "scenario's soak.window, else thirds).")  # fmt: skip
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=None,
    help="Streams in flight (default: the scenario's soak.concurrency, else 1).",
)
@TARGET_OPTIONS
@OUTPUT_OPTIONS
@click.option(
    "--fault",
    "faults",
    multiple=True,
    metavar="FAULT",
    help="A sim fault for this soak, e.g. drift=30 (percent per hour). Repeatable.",
)
@click.option(
    "--clock",
    type=CLOCK_CHOICE,
    callback=parse_clock,
    default=None,
    help="virtual: the sim's engine on a discrete-event clock, no HTTP (an hour in "
    "seconds; the default without --base-url); wall: real time over HTTP.",
)
@click.option("--seed", "run_seed", type=SEED_TYPE, default=None, help="Run seed for salts.")
@SIM_PROFILE_OPTION
@click.option("--progress/--no-progress", default=True, show_default=True)
def soak_cmd(
    scenario: str,
    duration: str | None,
    window: str | None,
    concurrency: int | None,
    base_url: str | None,
    api_key: str | None,
    model: str | None,
    telemetry_url: str | None,
    no_telemetry: bool,
    out_root: Path,
    overrides: tuple[str, ...],
    faults: tuple[str, ...],
    clock: ClockName | None,
    run_seed: int | None,
    sim_profile: Path | None,
    progress: bool,
) -> None:
    """Soak a server (or the sim) with SCENARIO's groups back to back; report drift."""
    clock = clock or (ClockName.WALL if base_url else ClockName.VIRTUAL)
    check_target(clock, base_url, telemetry_url, None)
    try:
        loaded = load_scenario(
            scenario, list(with_sim_profile(sim_profile, overrides, base_url, None))
        )
    except ScenarioError as exc:
        raise click.ClickException(str(exc)) from None
    settings = _soak_settings(loaded.soak or Soak(), duration, window, concurrency)
    if faults:
        if base_url:
            raise click.ClickException("--fault only applies to the built-in sim: drop --base-url")
        sim = loaded.sim or SimConfig()
        loaded = dataclasses.replace(loaded, sim=dataclasses.replace(
            sim, faults=tuple(sim.faults) + faults))  # fmt: skip
    base_url, api_key = resolved_target(base_url, api_key)
    # A soak on a long-lived server must start cold like any run: a fresh seed unless given.
    seed = resolve_run_seed(run_seed, None)
    stop = SoakStop(settings.duration_s)
    opts = RunOptions(
        base_url=base_url, api_key=api_key, model=model, out_root=out_root, run_seed=seed.value,
        progress=progress, stop=stop, self_watch=clock == ClockName.WALL, clock=clock,
        seed_source=seed.source, telemetry_url=telemetry_url, telemetry=not no_telemetry,
    )  # fmt: skip

    the_plan = plan(soak_scenario(loaded, settings), run_seed=seed.value)
    hint = "; `loadgen report DIR` gives the soak so far"
    report_run(execute(the_plan, opts, interrupted=hint))


def _soak_settings(
    base: Soak, duration: str | None, window: str | None, concurrency: int | None
) -> Soak:
    """The scenario's soak block with the command line's options on top (one-line errors)."""
    out = base
    if duration is not None:
        seconds = parse_duration(duration)
        if seconds is None:
            raise click.BadParameter(
                f"{duration!r}: use seconds or 90s, 10m, 1h", param_hint="--duration"
            )
        out = dataclasses.replace(out, duration_s=seconds)
    if window is not None:
        try:
            parse_window(window)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--window") from None
        out = dataclasses.replace(out, window=window)
    if concurrency is not None:
        out = dataclasses.replace(out, concurrency=concurrency)
    return out
