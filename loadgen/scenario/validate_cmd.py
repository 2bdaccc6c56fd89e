"""`loadgen validate FILE...`: load and check scenario files, run nothing."""

from __future__ import annotations

import click

from loadgen.scenario.load import ScenarioError, load_scenario


@click.command("validate")
@click.argument("files", nargs=-1, required=True)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY.PATH=VALUE",
    help="Override a field before validation (value parsed as YAML); repeatable.",
)
def validate_cmd(files: tuple[str, ...], overrides: tuple[str, ...]) -> None:
    """Check scenario FILEs (paths, or bare names from scenarios/); print every error."""
    failed = False
    for name in files:
        try:
            load_scenario(name, overrides)
        except ScenarioError as exc:
            failed = True
            for line in exc.errors:
                click.echo(line, err=True)
            continue
        click.echo(f"ok: {name}")
    if failed:
        raise SystemExit(1)
