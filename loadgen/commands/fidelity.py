"""`loadgen fidelity SCENARIO --sim-profile FILE (--base-url URL | --server KIND ...)`: the
scenario on the named server and on the virtual clock with the profile, and how far apart."""

from __future__ import annotations

import dataclasses
from functools import partial

import click

from loadgen.analysis.fidelity import DEFAULT_TOLERANCE
from loadgen.clock import ClockName
from loadgen.commands.options import (
    ProfiledArgs,
    RunArgs,
    profiled_options,
    run_like,
    usable_options,
)
from loadgen.commands.run import execute_work
from loadgen.engine.fidelity import run_fidelity


@click.command("fidelity")
@profiled_options("The profile to check (`loadgen calibrate`'s file).")
@click.option("--tolerance", type=click.FloatRange(0, 1000, min_open=True),
              default=DEFAULT_TOLERANCE * 100, show_default=True,
              help="Percent error within which a figure counts as reproduced.")  # fmt: skip
@run_like(progress=False, clock=False, sim_profile=False)
def fidelity_cmd(
    profiled: ProfiledArgs,
    tolerance: float,
    args: RunArgs,
) -> None:
    """Run SCENARIO on the server (--base-url, --server, or the scenario's server block; --server
    sim: the built-in sim as the scenario sets it) and on the virtual clock with --sim-profile;
    print each figure's error."""
    from loadgen.report.cmd import write_fidelity_report

    opts = usable_options(dataclasses.replace(args, clock=ClockName.WALL))
    real, predicted = profiled.scenarios(args.overrides)
    if not opts.base_url and opts.server is None and real.server is None:
        # Measured on the default target, the built-in sim, and called the server: an H200
        # profile scored 0 of 7 against a sim it was never fitted on.
        raise click.UsageError(
            "fidelity measures a server against the profile's prediction: name it with "
            "--base-url URL or --server KIND (--server sim measures the built-in sim)"
        )

    profile = profiled.sim_profile.resolve()
    work = partial(run_fidelity, real, predicted, profile, tolerance / 100, opts)
    root = execute_work(work)
    click.echo(write_fidelity_report(root))
    click.echo(f"run directory: {root}")
