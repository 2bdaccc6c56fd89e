"""`loadgen fidelity SCENARIO --sim-profile FILE (--base-url URL | --server KIND ... | --measured
RUN_DIR)`: the scenario on the named server (or a run of it recorded there before) and on the
virtual clock with the profile, and how far apart."""

from __future__ import annotations

import dataclasses
from functools import partial
from pathlib import Path

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
from loadgen.commands.run import execute_work, exit_if_failed
from loadgen.engine.fidelity import run_fidelity


@click.command("fidelity")
@profiled_options("The profile to check (`loadgen calibrate`'s file).")
@click.option("--tolerance", type=click.FloatRange(0, 1000, min_open=True),
              default=DEFAULT_TOLERANCE * 100, show_default=True,
              help="Percent error within which a figure counts as reproduced.")  # fmt: skip
@click.option("--measured", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=None,
              help="A finished run of SCENARIO on the server (a `loadgen run` directory, or a "
                   "fidelity's real/ run) to score the profile against instead of running the "
                   "server again: a new profile checked against yesterday's GPU hours. Its "
                   "recorded seed drives the prediction.")  # fmt: skip
@run_like(progress=False, clock=False, sim_profile=False)
def fidelity_cmd(
    profiled: ProfiledArgs,
    tolerance: float,
    measured: Path | None,
    args: RunArgs,
) -> None:
    """Run SCENARIO on the server (--base-url, --server, or the scenario's server block; --server
    sim: the built-in sim as the scenario sets it) and on the virtual clock with --sim-profile;
    print each figure's error."""
    from loadgen.report.cmd import write_fidelity_report

    if measured is not None:
        args = replayed_measured(args, measured)
    opts = usable_options(dataclasses.replace(args, clock=ClockName.WALL))
    real, predicted = profiled.scenarios(args.overrides)
    if measured is not None:
        check_measured_scenario(measured, real.name)
    elif not opts.base_url and opts.server is None and real.server is None:
        # Measured on the default target, the built-in sim, and called the server: an H200
        # profile scored 0 of 7 against a sim it was never fitted on.
        raise click.UsageError(
            "fidelity measures a server against the profile's prediction: name it with "
            "--base-url URL or --server KIND (--server sim measures the built-in sim)"
        )

    profile = profiled.sim_profile.resolve()
    work = partial(run_fidelity, real, predicted, profile, tolerance / 100, opts, measured)
    root = execute_work(work)
    click.echo(write_fidelity_report(root))
    click.echo(f"run directory: {root}")
    # As `run` exits: a measured side with failed streams scored the profile on the rest.
    from loadgen.analysis.inputs import read_manifest

    ran = read_manifest(root).fidelity
    if ran is not None and ran.real is not None:
        exit_if_failed(root / ran.real)


def replayed_measured(args: RunArgs, measured: Path) -> RunArgs:
    """`args` replaying the seed the measured run recorded, so the prediction sends the same
    prompts, salts and arrivals; another seed would predict a different run."""
    if args.seed.run_seed is not None or args.seed.replay is not None:
        raise click.UsageError(
            f"--measured {measured} replays the seed that run recorded: drop --seed / --replay"
        )
    if measured.parent.name != "real" and (measured / "real").is_dir():
        raise click.UsageError(
            f"--measured {measured} is a fidelity directory: pass its measured run, "
            f"{next((measured / 'real').iterdir(), measured / 'real')}"
        )
    return dataclasses.replace(args, seed=dataclasses.replace(args.seed, replay=measured))


def check_measured_scenario(measured: Path, scenario: str) -> None:
    """A measured run of another scenario, or one that stopped early, would score the profile
    on figures it never predicted: refused in one line."""
    from loadgen.analysis.inputs import NotARunDirectory, read_manifest

    try:
        manifest = read_manifest(measured)
    except NotARunDirectory as e:
        raise click.UsageError(f"--measured: {e}") from None
    recorded = manifest.scenario if isinstance(manifest.scenario, dict) else {}
    name = recorded.get("name")
    if manifest.interrupted is not False:
        raise click.UsageError(
            f"--measured {measured}: that run did not finish (run.json interrupted: "
            f"{manifest.interrupted}); pass a finished run"
        )
    if name != scenario:
        raise click.UsageError(
            f"--measured {measured}: that run is of scenario {name!r}, not {scenario!r}; "
            f"pass a run of {scenario} or name its scenario"
        )
