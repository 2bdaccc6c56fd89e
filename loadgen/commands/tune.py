"""`loadgen tune SCENARIO --sim-profile F --search 'flag=v1,v2;flag2=...' --slo ... --objective
goodput|throughput [--verify N --server KIND ...]`: what to set, ranked on the virtual clock
with a fitted profile, the top N proved on the server."""

from __future__ import annotations

import dataclasses
import json
from functools import partial

import click
import yaml

from loadgen.analysis.capacity import DEFAULT_MAX_STEPS, DEFAULT_REL_TOL, DEFAULT_REPEATS, Search
from loadgen.analysis.tune import OBJECTIVES
from loadgen.clock import ClockName
from loadgen.commands.options import (
    LOAD_RANGE_OPTIONS,
    ProfiledArgs,
    RunArgs,
    load_range,
    parsed_slo,
    profiled_options,
    run_like,
    slo_option,
    usable_options,
    with_slo,
)
from loadgen.commands.run import execute_work
from loadgen.engine.tune import CapacityAsk, TuneAsk, run_tune
from loadgen.scenario.load_axis import LoadAxis, load_problem
from loadgen.sim.profile_file import ProfileFileError, load_profile_file, unpredictable

# A 5 x 5 grid is searched whole; a larger one by coordinate descent through at most this many.
DEFAULT_MAX_POINTS = 25
DEFAULT_MAX_TIME_S = 1800.0


@click.command("tune")
@profiled_options("The fitted profile that predicts each point (calibrate's file).")
@click.option("--search", required=True, metavar="'flag=v1,v2;flag2=v1,v2'",
              help="The grid: sim flags under vLLM's names (dashes as underscores).")  # fmt: skip
@slo_option("What a stream must meet to count as good", required=True)
@click.option("--objective", type=click.Choice(sorted(OBJECTIVES)), default="goodput",
              show_default=True,
              help="goodput: requests/s meeting every SLO; throughput: output tok/s; capacity: "
              "the largest load (--over) meeting the SLO, as capacity searches.")  # fmt: skip
@click.option("--over", type=click.Choice(["concurrency", "rate"]), default=None,
              help="--objective capacity's load axis.")  # fmt: skip
@LOAD_RANGE_OPTIONS
@click.option("--max-points", type=click.IntRange(min=1), default=DEFAULT_MAX_POINTS,
              show_default=True,
              help="A grid up to this size is run whole; a larger one by coordinate descent "
              "through at most this many points.")  # fmt: skip
@click.option("--max-time", "max_time_s", type=click.FloatRange(min=1),
              default=DEFAULT_MAX_TIME_S, show_default=True,
              help="Wall seconds after which no new point starts.")  # fmt: skip
@click.option("--verify", type=click.IntRange(min=0), default=0, show_default=True,
              help="Run the top N on the server (--server KIND ...), 2 boots each.")  # fmt: skip
@run_like(progress=False, clock=False, sim_profile=False)
def tune_cmd(
    profiled: ProfiledArgs,
    search: str,
    slo: str,
    objective: str,
    over: str | None,
    lo: float | None,
    hi: float | None,
    max_points: int,
    max_time_s: float,
    verify: int,
    args: RunArgs,
) -> None:
    """Rank the points of --search for SCENARIO on the virtual clock with --sim-profile, by
    --objective under --slo, and name what binds each; --verify N proves the top N."""
    from loadgen.report.cmd import write_tune_report

    items = parsed_slo(slo)
    axes = parsed_search(search)
    try:
        profile = load_profile_file(profiled.sim_profile)
    except ProfileFileError as exc:
        raise click.ClickException(str(exc)) from None
    for flag in axes:
        reason = unpredictable(profile, flag)
        if reason is not None:
            raise click.ClickException(f"{profiled.sim_profile}: cannot rank {reason}")
    opts = usable_options(dataclasses.replace(args, clock=ClockName.WALL))
    if verify and opts.server is None:
        raise click.UsageError("--verify runs the top points on a launched server: add "
                               "--server KIND (--server sim: the built-in sim)")  # fmt: skip
    real, predicted = profiled.scenarios(args.overrides, (f"sweep={json.dumps(axes)}",))
    capacity = capacity_ask(objective, over, lo, hi, verify)
    problem = capacity and load_problem(dataclasses.replace(predicted, sweep=None), capacity.axis)
    if problem:
        raise click.ClickException(problem)
    ask = TuneAsk(predicted, real, profiled.sim_profile.resolve(), objective, items, max_points,
                  max_time_s, verify, capacity)  # fmt: skip

    root = execute_work(partial(run_tune, ask, with_slo(opts, items)))
    click.echo(write_tune_report(root))
    click.echo(f"run directory: {root}")


def capacity_ask(
    objective: str, over: str | None, lo: float | None, hi: float | None, verify: int
) -> CapacityAsk | None:
    """--objective capacity's search per point (capacity's defaults); None for another."""
    if objective != "capacity":
        if over is not None or lo is not None or hi is not None:
            raise click.UsageError("--over, --min and --max size --objective capacity's search")
        return None
    if over is None:
        raise click.UsageError("--objective capacity searches a load: add --over concurrency|rate")
    if verify:
        raise click.UsageError("--verify runs the scenario's own load on the server; with "
                               "--objective capacity it is not offered: verify a point with "
                               "`loadgen capacity --server KIND`")  # fmt: skip
    lo, hi = load_range(over, lo, hi)
    search = Search(over, lo, hi, DEFAULT_REPEATS, DEFAULT_REL_TOL, DEFAULT_MAX_STEPS)
    return CapacityAsk(LoadAxis(over), search)


def parsed_search(text: str) -> dict[str, list[object]]:
    """--search's axes in order; a usage error naming the bad item otherwise."""
    axes: dict[str, list[object]] = {}
    for item in filter(None, (part.strip() for part in text.split(";"))):
        flag, eq, values = item.partition("=")
        flag = flag.strip().replace("-", "_")
        parsed = [yaml.safe_load(v) for v in values.split(",") if v.strip()] if eq else []
        if not flag or not parsed:
            raise click.UsageError(f"--search {item!r}: expected flag=v1,v2 (items split by ;)")
        if flag in axes:
            raise click.UsageError(f"--search: {flag} is given twice")
        axes[flag] = parsed
    if not axes:
        raise click.UsageError("--search: no axes (expected 'flag=v1,v2;flag2=v1,v2')")
    return axes
