"""`loadgen fidelity SCENARIO --sim-profile FILE (--base-url URL | --server KIND ...)`: the
scenario on the named server and on the virtual clock with the profile, and how far apart."""

from __future__ import annotations

import dataclasses
from functools import partial
from pathlib import Path

import click

from loadgen.analysis.fidelity import DEFAULT_TOLERANCE
from loadgen.clock import ClockName
from loadgen.commands.options import (
    RunArgs,
    run_like,
    usable_options,
    with_sim_profile,
)
from loadgen.commands.run import execute_work
from loadgen.engine.fidelity import run_fidelity
from loadgen.scenario.load import ScenarioError, load_scenario


@click.command("fidelity")
@click.argument("scenario")
@click.option("--sim-profile", "sim_profile", required=True,
              type=click.Path(dir_okay=False, path_type=Path),
              help="The profile to check (`loadgen calibrate`'s file).")  # fmt: skip
@click.option("--tolerance", type=click.FloatRange(0, 1000, min_open=True),
              default=DEFAULT_TOLERANCE * 100, show_default=True,
              help="Percent error within which a figure counts as reproduced.")  # fmt: skip
@run_like(progress=False, clock=False, sim_profile=False)
def fidelity_cmd(
    scenario: str,
    sim_profile: Path,
    tolerance: float,
    args: RunArgs,
) -> None:
    """Run SCENARIO on the server (--base-url, --server, or the scenario's server block; --server
    sim: the built-in sim as the scenario sets it) and on the virtual clock with --sim-profile;
    print each figure's error."""
    from loadgen.report.cmd import write_fidelity_report

    opts = usable_options(dataclasses.replace(args, clock=ClockName.WALL))
    try:
        real = load_scenario(scenario, args.overrides)
        predicted = load_scenario(scenario, with_sim_profile(sim_profile, args.overrides))
    except ScenarioError as exc:
        raise click.ClickException(str(exc)) from None
    if not opts.base_url and opts.server is None and real.server is None:
        # Measured on the default target, the built-in sim, and called the server: an H200
        # profile scored 0 of 7 against a sim it was never fitted on.
        raise click.UsageError(
            "fidelity measures a server against the profile's prediction: name it with "
            "--base-url URL or --server KIND (--server sim measures the built-in sim)"
        )

    def say(line: str) -> None:
        click.echo(line, err=True)

    work = partial(run_fidelity, real, predicted, sim_profile.resolve(), tolerance / 100, opts,
                   say=say)  # fmt: skip
    root = execute_work(work)
    click.echo(write_fidelity_report(root))
    click.echo(f"run directory: {root}")
