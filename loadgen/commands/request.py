"""`loadgen request`: fire COUNT streams at CONCURRENCY (closed loop) and show each one.

A request is a planned run of a one-group scenario (salted prose prompts, a closed loop),
through the arm driver every run takes, into a run directory of `loadgen run`'s layout: --out
names it, else a temporary one holds it while its tables are made. The command's options only
are read at import: what it runs is imported once they are, so `--help` and a usage error cost
no HTTP client, analysis or tables (0.40 s -> 0.1 s on a 2-core machine)."""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from loadgen.client.endpoint import Timeouts
from loadgen.commands.options import (
    RAY_OPTION,
    SEED_OPTIONS,
    STRICT_OPTION,
    TARGET_OPTIONS,
    WATCH_OPTIONS,
    OutputArgs,
    RunArgs,
    SeedArgs,
    TargetArgs,
    TelemetryArgs,
    WatchArgs,
    api_option,
    usable_options,
)
from loadgen.scenario.limits import MAX_PROMPT_TOKENS, MAX_STREAMS

if TYPE_CHECKING:
    from loadgen.report.request_tables import RequestReport
    from loadgen.scenario.model import Scenario

# The one group of a request run, as its records and its scenario name it.
GROUP = "request"


@click.command("request")
@TARGET_OPTIONS
@api_option("completions")
@click.option(
    "--prompt-tokens", type=click.IntRange(1, MAX_PROMPT_TOKENS), default=100, show_default=True
)
@click.option("--max-tokens", type=click.IntRange(1), default=128, show_default=True)
@click.option("-n", "--count", type=click.IntRange(1, MAX_STREAMS), default=1, show_default=True)
@click.option("-c", "--concurrency", type=click.IntRange(1), default=1, show_default=True)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Run directory: a new or empty folder.",
)
@click.option("--ignore-eos/--no-ignore-eos", default=True, show_default=True)
@click.option("--first-byte-timeout", type=click.FloatRange(min=0, min_open=True), default=600.0)
@click.option("--idle-timeout", type=click.FloatRange(min=0, min_open=True), default=60.0)
@SEED_OPTIONS
@click.option(
    "--workers",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="Processes to split the streams across (each its own event loop and core).",
)
@RAY_OPTION
@STRICT_OPTION
@click.option(
    "--total-timeout",
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds from send to end of a stream; default unbounded.",
)
@click.option(
    "--per-stream",
    is_flag=True,
    help="Print a row per stream (default: the summary, and rows only for failed streams).",
)
@WATCH_OPTIONS
def request_cmd(target: TargetArgs, seed: SeedArgs, watch: WatchArgs, **opts: Any) -> None:
    """Fire COUNT streams at CONCURRENCY and print TTFT, decode-only tok/s, tokens and chunks."""
    # A launched server or the built-in sim is `loadgen run`'s: request loads a server by URL.
    # No live view and no GPU sampling: a quick look prints its tables at the end.
    if target.sim_replicas > 1:
        # Offered by the shared target options, it could never be used here: without a URL
        # "no server given", with one "drop --base-url".
        raise click.UsageError(
            "--sim-replicas boots built-in sims for `run` and `soak`; request streams to "
            "servers by URL: repeat --base-url (each one a `loadgen sim --port P`)"
        )
    args = RunArgs(target, output=OutputArgs(progress=False), seed=seed,
                   telemetry=TelemetryArgs(no_telemetry=True), watch=watch)  # fmt: skip
    run = usable_options(args, needs_url=True, routed=True, workers=opts["workers"],
                         ray_address=opts["ray_address"])  # fmt: skip
    assert run.base_url is not None and run.run_seed is not None
    # Imported here, past every usage error: the run's modules are most of the command's start.
    from loadgen.analysis.selferror import CLIENT_LIMITED_EXIT
    from loadgen.commands.run import ensure_ray, execute_work, exit_if_failed, plan_work
    from loadgen.report.request_tables import request_report
    from loadgen.scenario.plan import plan

    ensure_ray(opts["ray_address"])
    the_plan = plan(request_scenario(run.run_seed, run.model, opts), run_seed=run.run_seed)
    # Width: the terminal's, or a wide fixed one when piped (80 columns truncate the tables).
    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else 160
    show = partial(request_report, api=opts["api"], prompt_tokens=opts["prompt_tokens"],
                   per_stream=opts["per_stream"], width=width)  # fmt: skip
    with _run_root(opts["out"]) as (root, name):
        work = plan_work(the_plan, dataclasses.replace(run, out_root=root), name=name)
        path = execute_work(work, on_stop=partial(_stopped, show, opts["count"]))
        shown = show(path)
        _print(shown)
        exit_if_failed(path)
    if shown.client_limited and opts["strict"]:
        raise click.exceptions.Exit(CLIENT_LIMITED_EXIT)


def request_scenario(seed: int, model: str | None, opts: dict[str, Any]) -> Scenario:
    """The scenario a request is: one group of `--count` salted prose prompts in a closed loop
    of `--concurrency`, its text and salts from the run seed."""
    from loadgen.scenario.model import Closed, Group, PromptConfig, Scenario

    count, tokens, concurrency = opts["count"], opts["prompt_tokens"], opts["concurrency"]
    group = Group(GROUP, count, PromptConfig(tokens, "prose", "salted"), opts["max_tokens"],
                  ignore_eos=opts["ignore_eos"])  # fmt: skip
    timeouts = Timeouts(first_token_s=opts["first_byte_timeout"], idle_s=opts["idle_timeout"],
                        total_s=opts["total_timeout"])  # fmt: skip
    return Scenario(
        name="request",
        seed=seed,
        groups=(group,),
        arrival=Closed(concurrency, count=count),
        description=f"loadgen request: {count} salted prose prompts of {tokens} tokens, "
        f"{opts['max_tokens']} out, {concurrency} in flight",
        api=opts["api"],
        model=model,
        timeouts=timeouts,
    )


@contextlib.contextmanager
def _run_root(out: Path | None) -> Iterator[tuple[Path, str]]:
    """The folder that receives the run directory and its name: --out's parent and name, or a
    temporary folder removed once the tables are printed."""
    if out is not None:
        yield out.parent, out.name
        return
    with tempfile.TemporaryDirectory(prefix="loadgen-request-") as tmp:
        yield Path(tmp), GROUP


def _print(shown: RequestReport) -> None:
    if shown.banner:
        click.echo(shown.banner)
    click.echo(shown.text, nl=False)


def _stopped(show: Callable[[Path], RequestReport], count: int, run_dir: Path | None) -> str:
    """A stopped request's tables of what it recorded, and its last line."""
    finished = 0
    if run_dir is not None:
        shown = show(run_dir)
        _print(shown)
        finished = shown.finished
    return f"interrupted: {finished} of {count} streams finished"
