"""`loadgen validate FILE...`: load and check scenario files, run nothing."""

from __future__ import annotations

import click

from loadgen.scenario.limits import sim_window, window_problem
from loadgen.scenario.load import ScenarioError, load_scenario

ALLOW_FILES_OUTSIDE = click.option(
    "--allow-files-outside",
    is_flag=True,
    help="Let prompt files ({file: path}) lie outside the scenario's folder; their text is "
    "sent to the server.",
)


@click.command("validate")
@click.argument("files", nargs=-1, required=True)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY.PATH=VALUE",
    help="Override a field before validation (value parsed as YAML); repeatable.",
)
@ALLOW_FILES_OUTSIDE
def validate_cmd(
    files: tuple[str, ...], overrides: tuple[str, ...], allow_files_outside: bool
) -> None:
    """Check scenario FILEs (paths, or bare names from scenarios/); print every error."""
    failed = False
    for name in files:
        try:
            scenario = load_scenario(name, overrides, allow_files_outside=allow_files_outside)
        except ScenarioError as exc:
            failed = True
            for line in exc.errors:
                click.echo(line, err=True)
            continue
        # A scenario with a `sim:` block names its target's window; an external server's is
        # checked at run start, from its /v1/models.
        problem = scenario.sim and window_problem(scenario, sim_window(scenario), "the sim")
        if problem:
            failed = True
            click.echo(f"{scenario.source or name}: {problem}", err=True)
            continue
        click.echo(f"ok: {name}")
    if failed:
        raise SystemExit(1)
