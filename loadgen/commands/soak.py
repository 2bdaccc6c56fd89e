"""`loadgen soak SCENARIO`: back-to-back traffic for a duration, then the soak report."""

from __future__ import annotations

import dataclasses
import sys

import click

from loadgen.analysis.precision import PrecisionTarget
from loadgen.clock import ClockName
from loadgen.commands.options import (
    SOAK_PRECISE_OPTION,
    RunArgs,
    loaded_scenario,
    not_builtin_sim,
    run_like,
    usable_options,
)
from loadgen.commands.run import FAILED_STREAMS_EXIT, execute, report_run
from loadgen.engine.soak import SoakStop, soak_scenario
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
@click.option(
    "--fault",
    "faults",
    multiple=True,
    metavar="FAULT",
    help="A sim fault for this soak, e.g. drift=30 (percent per hour). Repeatable.",
)
@SOAK_PRECISE_OPTION
@run_like(watch=True)
def soak_cmd(
    scenario: str,
    duration: str | None,
    window: str | None,
    concurrency: int | None,
    faults: tuple[str, ...],
    until_precise: tuple[PrecisionTarget, ...],
    args: RunArgs,
) -> None:
    """Soak a server (or the sim) with SCENARIO's groups back to back; report drift."""
    # A soak on a long-lived server must start cold like any run: a fresh seed unless given.
    opts = usable_options(args, sim_clock=ClockName.VIRTUAL, routed=True,
                          soak_precise=until_precise)  # fmt: skip
    loaded = loaded_scenario(scenario, args.sets())
    settings = _soak_settings(loaded.soak or Soak(), duration, window, concurrency)
    if faults:
        if not_builtin_sim(opts.base_url, opts.server):
            raise click.ClickException(
                "--fault only applies to the built-in sim: drop --base-url / --server KIND"
            )
        sim = loaded.sim or SimConfig()
        loaded = dataclasses.replace(loaded, sim=dataclasses.replace(
            sim, faults=tuple(sim.faults) + faults))  # fmt: skip
    stop = SoakStop(settings.duration_s)
    opts = dataclasses.replace(opts, stop=stop, self_watch=opts.clock == ClockName.WALL)

    the_plan = plan(soak_scenario(loaded, settings), run_seed=opts.run_seed)
    hint = "; `loadgen report DIR` gives the soak so far"
    report_run(execute(the_plan, opts, interrupted=hint))
    if stop.server_stopped:
        # Every stream it sent may be ok, yet it never ran its duration: not a success.
        click.echo(f"Error: the soak ended early: {stop.reason} ({stop.detail})", err=True)
        sys.exit(FAILED_STREAMS_EXIT)


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
