"""`loadgen calibrate --base-url URL | --server KIND ...`: fit the sim's step costs to a server
and write a profile file (`--sim-profile FILE` then runs the sim as that server)."""

from __future__ import annotations

import dataclasses
from functools import partial
from pathlib import Path

import click

from loadgen.analysis.calibration import PlanLimits
from loadgen.clock import ClockName
from loadgen.commands.options import (
    RunArgs,
    loaded_scenario,
    not_builtin_sim,
    run_like,
    usable_options,
)
from loadgen.commands.run import execute_work
from loadgen.engine.calibrate import CalibrateRequest, calibrate, refit
from loadgen.engine.preflight import check_out_root
from loadgen.engine.target import RunError

DEFAULTS = PlanLimits()


@click.command("calibrate")
@click.option("--profile-out", "profile_out", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="The profile file (default: RUN/profile.yaml).")  # fmt: skip
@click.option("--name", default=None, help="The profile's name (default: KIND-DATE).")
@click.option("--refit", "refit_dir", type=click.Path(file_okay=False, path_type=Path),
              default=None, help="Fit a calibration directory's recorded points again; "
              "sends nothing.")  # fmt: skip
@click.option("--hardware", default=None,
              help="What the server runs on, for the profile (default: this host).")  # fmt: skip
@click.option("--scenario", "base", default="calibrate", show_default=True,
              help="The points' base scenario (api, model, timeouts, sim block).")  # fmt: skip
@click.option("--reps", type=click.IntRange(1, 20), default=DEFAULTS.reps, show_default=True,
              help="Runs of each point (the median is kept).")  # fmt: skip
@click.option("--max-prompt", "max_prompt", type=click.IntRange(min=64),
              default=DEFAULTS.max_prompt_tokens, show_default=True,
              help="Longest prompt a point sends (the window caps it too).")  # fmt: skip
@click.option("--decode-tokens", type=click.IntRange(8, 4096), default=DEFAULTS.decode_tokens,
              show_default=True, help="max_tokens of the decode points.")  # fmt: skip
@click.option("--max-requests", type=click.IntRange(min=1), default=400, show_default=True,
              help="Refuse a plan that would send more.")  # fmt: skip
@click.option("--max-time", "max_time_s", type=click.FloatRange(min=1), default=900.0,
              show_default=True,
              help="Seconds of points (a server's boot not counted) after which no new point "
              "starts, split among the boots by their planned requests.")  # fmt: skip
@click.option("--budgets", default=None, metavar="N,N|off",
              help="max_num_batched_tokens of the boots after the first, each a fresh boot "
              "that measures the cold prefills again, so a prefill step's cost and a prefill "
              "token's come apart (a server loadgen launches; default: a quarter of the first "
              "boot's; off: one boot).")  # fmt: skip
@run_like(progress=False, sim_profile=False)
def calibrate_cmd(
    profile_out: Path | None,
    name: str | None,
    refit_dir: Path | None,
    hardware: str | None,
    base: str,
    reps: int,
    max_prompt: int,
    decode_tokens: int,
    max_requests: int,
    max_time_s: float,
    budgets: str | None,
    args: RunArgs,
) -> None:
    """Measure a server's step costs with a short, bounded plan and fit the sim to them."""
    from loadgen.report.cmd import write_calibration_report

    if profile_out is not None:
        # Checked before any point runs: the whole calibration once ran first, then failed.
        try:
            check_out_root(profile_out.parent, "--profile-out's folder")
        except RunError as exc:
            raise click.ClickException(str(exc)) from None
    if refit_dir is not None:
        source = click.get_current_context().get_parameter_source("out_root")
        if source is click.core.ParameterSource.COMMANDLINE:
            # It was ignored in silence: no folder was made, and DIR was rewritten.
            raise click.UsageError(
                "--refit DIR writes its profile, run.json and report into DIR: drop --out "
                "(--profile-out FILE writes the profile there too)"
            )
        try:
            root = refit(refit_dir, profile_out, name, hardware)
        except (RunError, OSError, ValueError) as exc:
            raise click.ClickException(str(exc).splitlines()[0]) from None
        click.echo(write_calibration_report(root), nl=False)
        _say_profile_out(profile_out)
        return
    opts = usable_options(args)
    if not opts.base_url and opts.server is None and opts.clock == ClockName.WALL:
        raise click.UsageError(
            "calibrate needs a server: --base-url URL, or --server KIND to launch one "
            "(--server sim or --clock virtual calibrate the built-in sim)"
        )
    scenario = loaded_scenario(base, args.overrides)
    if not_builtin_sim(opts.base_url, opts.server):
        # The sim block describes the built-in sim; a real server has its own limits.
        scenario = dataclasses.replace(scenario, sim=None)
    req = CalibrateRequest(
        scenario, PlanLimits(reps, max_prompt, decode_tokens), max_requests, max_time_s,
        out=profile_out, name=name, hardware=hardware, budgets=_budgets(budgets),
    )  # fmt: skip

    root = execute_work(partial(calibrate, req, opts))
    click.echo(write_calibration_report(root), nl=False)
    _say_profile_out(profile_out)
    click.echo(f"run directory: {root}")


def _budgets(raw: str | None) -> tuple[int, ...] | None:
    if raw is None:
        return None
    if raw.strip() == "off":
        return ()
    try:
        values = tuple(int(v) for v in raw.split(","))
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        raise click.BadParameter(f"{raw!r}: expected budgets like 512,256, or off",
                                 param_hint="--budgets")  # fmt: skip
    return values


def _say_profile_out(path: Path | None) -> None:
    if path is not None:
        click.echo(f"profile written to {path} (a copy is in the run directory)")
