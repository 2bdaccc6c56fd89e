"""`loadgen run SCENARIO`: the main job, from a scenario name to a report."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import click
import uvloop

from loadgen.engine.probe_cmd import server_options, server_spec
from loadgen.engine.run import RunOptions, run_plan
from loadgen.engine.target import RunError
from loadgen.scenario.load import ScenarioError, load_scenario
from loadgen.scenario.plan import plan
from loadgen.server.launcher import ServerBootError


@click.command("run")
@click.argument("scenario")
@click.option(
    "--base-url",
    envvar="OPENAI_BASE_URL",
    default=None,
    help="Server to load (default: boot the built-in sim). Env: OPENAI_BASE_URL.",
)
@click.option("--api-key", envvar="OPENAI_API_KEY", default=None, help="Env: OPENAI_API_KEY.")
@click.option("--model", default=None, help="Model name (default: the server's first).")
@click.option(
    "--api",
    type=click.Choice(["completions", "chat"]),
    default=None,
    help="Override the scenario's API.",
)
@click.option(
    "--out",
    "out_root",
    type=click.Path(path_type=Path),
    default=Path("runs"),
    show_default=True,
    help="Folder that receives the run directory.",
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a scenario field, e.g. --set groups.minnows.count=7.",
)
@click.option(
    "--seed",
    "run_seed",
    type=int,
    default=None,
    help="Run seed for salts (default: the scenario's seed; recorded in run.json).",
)
@click.option(
    "--block-size",
    type=click.IntRange(min=1),
    default=None,
    help="Cache block size of an external server that does not report it.",
)
@server_options
@click.option(
    "--boot-order-seed",
    type=int,
    default=None,
    help="Shuffle each round of a sweep's boots with this seed (default: A B C A B C).",
)
@click.option("--progress/--no-progress", default=True, show_default=True)
def run_cmd(
    scenario: str,
    base_url: str | None,
    api_key: str | None,
    model: str | None,
    api: str | None,
    out_root: Path,
    overrides: tuple[str, ...],
    run_seed: int | None,
    block_size: int | None,
    server_kind: str | None,
    server_args: tuple[str, ...],
    model_path: Path | None,
    boot_order_seed: int | None,
    progress: bool,
) -> None:
    """Run a scenario (a file, or a name in scenarios/) and print its report."""
    sets = list(overrides) + ([f"api={api}"] if api else [])
    try:
        loaded = load_scenario(scenario, sets)
    except ScenarioError as exc:
        raise click.ClickException(str(exc)) from None
    server = server_spec(server_kind, server_args, model_path)
    if server is not None and base_url:
        raise click.UsageError("give --base-url or --server, not both")
    opts = RunOptions(
        base_url=base_url, api_key=api_key, model=model, out_root=out_root, run_seed=run_seed,
        progress=progress, block_size=block_size, server=server, boot_order_seed=boot_order_seed,
    )  # fmt: skip

    def warn(msg: str) -> None:
        click.echo(f"warning: {msg}", err=True)

    # SIGTERM stops a run the way Ctrl-C does: tasks cancelled, records and manifest flushed.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        run_dir = uvloop.run(run_plan(plan(loaded, run_seed=run_seed), opts, warn))
    except (RunError, ServerBootError) as exc:
        raise click.ClickException(str(exc).splitlines()[0]) from None
    except KeyboardInterrupt:
        click.echo("interrupted: records written so far are kept", err=True)
        sys.exit(130)
    report_run(run_dir)


def report_run(run_dir: Path) -> None:
    from loadgen.report.cmd import write_report

    click.echo(write_report(run_dir))
    click.echo(f"run directory: {run_dir}")
