"""`loadgen fidelity SCENARIO --sim-profile FILE (--base-url URL | --server KIND ...)`: the
scenario on the named server and on the virtual clock with the profile, and how far apart."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import click

from loadgen.analysis.fidelity import DEFAULT_TOLERANCE
from loadgen.engine.cli_options import (
    EXTERNAL_SERVER_OPTIONS,
    OUTPUT_OPTIONS,
    TARGET_OPTIONS,
    LaunchArgs,
    check_target,
    external_server,
    resolved_target,
    server_options,
    with_sim_profile,
)
from loadgen.engine.cmd import execute_work
from loadgen.engine.fidelity import run_fidelity
from loadgen.engine.options import RunOptions
from loadgen.engine.seeds import SEED_TYPE, resolve_run_seed
from loadgen.scenario.load import ScenarioError, load_scenario
from loadgen.server.user_facts import USER_SOURCE


@click.command("fidelity")
@click.argument("scenario")
@click.option("--sim-profile", "sim_profile", required=True,
              type=click.Path(dir_okay=False, path_type=Path),
              help="The profile to check (`loadgen calibrate`'s file).")  # fmt: skip
@click.option("--tolerance", type=click.FloatRange(0, 1000, min_open=True),
              default=DEFAULT_TOLERANCE * 100, show_default=True,
              help="Percent error within which a figure counts as reproduced.")  # fmt: skip
@TARGET_OPTIONS
@OUTPUT_OPTIONS
@EXTERNAL_SERVER_OPTIONS
@click.option("--seed", "run_seed", type=SEED_TYPE, default=None,
              help="Run seed for salts (one for both sides).")  # fmt: skip
@server_options
@click.option("--progress/--no-progress", default=False, show_default=True)
def fidelity_cmd(
    scenario: str,
    sim_profile: Path,
    tolerance: float,
    base_url: str | None,
    api_key: str | None,
    model: str | None,
    telemetry_url: str | None,
    no_telemetry: bool,
    out_root: Path,
    overrides: tuple[str, ...],
    server_facts: tuple[str, ...],
    server_flags: tuple[str, ...],
    run_seed: int | None,
    launch: LaunchArgs,
    progress: bool,
) -> None:
    """Run SCENARIO on the server (--base-url, --server, or the scenario's server block; --server
    sim: the built-in sim as the scenario sets it) and on the virtual clock with --sim-profile;
    print each figure's error."""
    from loadgen.report.cmd import write_fidelity_report

    server = launch.spec(model)
    check_target("wall", base_url, telemetry_url, server)
    facts, flags = external_server(server_facts, server_flags, base_url)
    predicted_sets = with_sim_profile(sim_profile, overrides, None, None)
    try:
        real = load_scenario(scenario, overrides)
        predicted = load_scenario(scenario, predicted_sets)
    except ScenarioError as exc:
        raise click.ClickException(str(exc)) from None
    if not base_url and server is None and real.server is None:
        # Measured on the default target, the built-in sim, and called the server: an H200
        # profile scored 0 of 7 against a sim it was never fitted on.
        raise click.UsageError(
            "fidelity measures a server against the profile's prediction: name it with "
            "--base-url URL or --server KIND (--server sim measures the built-in sim)"
        )
    base_url, api_key = resolved_target(base_url, api_key)
    seed = resolve_run_seed(run_seed, None)
    opts = RunOptions(
        base_url=base_url, api_key=api_key, model=model, out_root=out_root, run_seed=seed.value,
        progress=progress, seed_source=seed.source, server=server, server_facts=facts,
        server_facts_sources=dict.fromkeys(facts, USER_SOURCE), server_flags=tuple(flags),
        telemetry_url=telemetry_url, telemetry=not no_telemetry,
    )  # fmt: skip

    def say(line: str) -> None:
        click.echo(line, err=True)

    work = partial(run_fidelity, real, predicted, sim_profile.resolve(), tolerance / 100, opts,
                   say=say)  # fmt: skip
    root = execute_work(work)
    click.echo(write_fidelity_report(root))
    click.echo(f"run directory: {root}")
