"""`loadgen capacity SCENARIO --slo ... --over concurrency|rate`: the largest load that meets
the SLO, searched by bracketing and bisection, and what binds beyond it."""

from __future__ import annotations

from functools import partial

import click

from loadgen.analysis.capacity import DEFAULT_MAX_STEPS, DEFAULT_REL_TOL, DEFAULT_REPEATS, Search
from loadgen.analysis.precision import PrecisionTarget
from loadgen.analysis.slo import DEFAULT_ATTAIN
from loadgen.commands.options import (
    LOAD_RANGE_OPTIONS,
    REQUESTS_OPTION,
    UNTIL_PRECISE_OPTION,
    RunArgs,
    load_range,
    loaded_scenario,
    parsed_slo,
    renamed_option,
    run_like,
    slo_option,
    usable_options,
)
from loadgen.commands.run import execute_work
from loadgen.engine.capacity import search_capacity
from loadgen.scenario.limits import size_problems
from loadgen.scenario.load_axis import LoadAxis, load_problem, with_load

DEFAULT_MAX_TIME_S = 3600.0


@click.command("capacity")
@click.argument("scenario")
@slo_option("What each load must meet (a bare metric=limit takes --attain as its share)",
            required=True)  # fmt: skip
@click.option("--over", type=click.Choice(["concurrency", "rate"]), required=True)
@click.option(
    "--group",
    default=None,
    help="Make this group's count the load (under together/staggered) and judge the SLO on "
    "its streams alone.",
)
@LOAD_RANGE_OPTIONS
@click.option(
    "--attain",
    type=click.FloatRange(min=0, max=1, min_open=True),
    default=DEFAULT_ATTAIN,
    show_default=True,
    help="Share of streams that must meet an SLO item without its own pNN.",
)
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    default=DEFAULT_REPEATS,
    show_default=True,
    help="Runs of each of the two boundary loads (each with its own arrivals and salts).",
)
@click.option("--rel-tol", type=click.FloatRange(min=0.001), default=DEFAULT_REL_TOL,
              show_default=True, help="A rate's resolution, relative to it.")  # fmt: skip
@renamed_option("--max-steps", "--max-probes", type=click.IntRange(min=1),
                default=DEFAULT_MAX_STEPS, show_default=True,
                help="Most runs the search makes (one load each) before it stops.")  # fmt: skip
@click.option(
    "--max-time",
    "max_time_s",
    type=click.FloatRange(min=1),
    default=DEFAULT_MAX_TIME_S,
    show_default=True,
    help="Wall seconds after which no new step starts.",
)
@REQUESTS_OPTION
@UNTIL_PRECISE_OPTION
@run_like(watch=True)
def capacity_cmd(
    scenario: str,
    slo: str,
    over: str,
    group: str | None,
    lo: float | None,
    hi: float | None,
    attain: float,
    repeats: int,
    rel_tol: float,
    max_steps: int,
    max_time_s: float,
    requests: int | None,
    until_precise: tuple[PrecisionTarget, ...],
    args: RunArgs,
) -> None:
    """Search the largest load of SCENARIO that meets --slo, and name what binds beyond it."""
    from loadgen.report.cmd import write_capacity_report

    items = parsed_slo(slo, attain)
    lo, hi = load_range(over, lo, hi)
    # each step stops when precise
    opts = usable_options(args, routed=True, until_precise=until_precise)
    loaded = loaded_scenario(scenario, args.sets())
    axis = LoadAxis(over, group, requests)
    problem = load_problem(loaded, axis)
    if problem:
        raise click.ClickException(problem)
    per_step = size_problems([with_load(loaded, axis, hi)] * max_steps)
    if per_step:
        raise click.ClickException(f"{loaded.source}: at --max {hi:g}: {per_step[0]}")
    search = Search(over, lo, hi, repeats, rel_tol, max_steps)

    work = partial(search_capacity, loaded, axis, search, items, opts, max_time_s=max_time_s)
    root = execute_work(work)
    click.echo(write_capacity_report(root))
    click.echo(f"run directory: {root}")
