"""`loadgen run SCENARIO`: the main job, from a scenario name to a report."""

from __future__ import annotations

import asyncio
import errno
import signal
import sys
from collections import Counter
from collections.abc import Callable, Coroutine
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import click
import orjson
import uvloop

from loadgen.analysis.inputs import arm_dirs, read_manifest
from loadgen.analysis.precision import PrecisionTarget
from loadgen.analysis.selferror import CLIENT_LIMITED_EXIT
from loadgen.analysis.summary import MEASURE
from loadgen.analysis.summary_types import read_run
from loadgen.client.errors import ClientError
from loadgen.client.ray_pool import RayUnavailable, import_ray
from loadgen.commands.options import (
    LOAD_SWEEP_OPTIONS,
    RAY_OPTION,
    STRICT_OPTION,
    UNTIL_PRECISE_OPTION,
    LoadSweepArgs,
    RunArgs,
    api_option,
    loaded_scenario,
    parsed_slo,
    run_like,
    slo_option,
    usable_options,
    with_load_sweep,
    with_slo,
    workers_value,
)
from loadgen.commands.validate import ALLOW_FILES_OUTSIDE
from loadgen.engine.run import Hooks, RunOptions, run_plan
from loadgen.engine.seeds import SEED_TYPE
from loadgen.engine.target import RunError
from loadgen.messages import one_line
from loadgen.records import StreamRecord, install_stop_signals, read_streams, stop_exit_code
from loadgen.report.readable import ARM_TABLES_OPTION
from loadgen.scenario.plan import Plan, plan
from loadgen.scenario.token_counter import PromptSizeError
from loadgen.server.launcher import ServerBootError

T = TypeVar("T")
# Exit codes of `loadgen run`: 0 every measured stream ok; 1 the run could not start (bad input,
# unreachable server, boot failure); 2 usage; 3 client-limited under --strict (selferror.py);
# 4 the run ended but a measured stream failed (or a soak's server stopped serving before its
# duration); 5 its report could not be written (disk full);
# 130 stopped by SIGINT, 143 by SIGTERM (records
# written so far are kept, and the report of them printed).
FAILED_STREAMS_EXIT = 4
# 5: the records are written but the report of them is not (the disk filled up).
REPORT_FAILED_EXIT = 5


@click.command("run")
@click.argument("scenario")
@run_like(watch=True)
@api_option(None, "Override the scenario's API.")
@click.option(
    "--block-size",
    type=click.IntRange(min=1),
    default=None,
    help="Cache block size of an external server that does not report it.",
)
@slo_option("SLOs for goodput; each overrides the scenario's slo of its metric")
@click.option(
    "--boot-order-seed",
    type=SEED_TYPE,
    default=None,
    help="Shuffle each round of a sweep's boots with this seed (default: A B C A B C).",
)
@LOAD_SWEEP_OPTIONS
@click.option(
    "--workers",
    default="auto",
    show_default=True,
    metavar="N|auto",
    callback=lambda _ctx, _param, value: workers_value(value),
    help="Client processes that send the measured streams, each its own event loop (auto: one "
    "per 256 streams in flight, up to the cores, one left to a server on this host; under "
    "--ray, one per node, more for many streams).",
)
@RAY_OPTION
@STRICT_OPTION
@UNTIL_PRECISE_OPTION
@ARM_TABLES_OPTION
@ALLOW_FILES_OUTSIDE
def run_cmd(
    scenario: str,
    args: RunArgs,
    api: str | None,
    block_size: int | None,
    slo: str | None,
    boot_order_seed: int | None,
    load: LoadSweepArgs,
    workers: int | None = None,
    ray_address: str | None = None,
    strict: bool = False,
    until_precise: tuple[PrecisionTarget, ...] = (),
    arm_tables: bool = False,
    allow_files_outside: bool = False,
) -> None:
    """Run a scenario (a file, or a name in scenarios/) and print its report."""
    opts = usable_options(args, routed=True, block_size=block_size,
                          boot_order_seed=boot_order_seed, workers=workers,
                          ray_address=ray_address, until_precise=until_precise)  # fmt: skip
    ensure_ray(ray_address)
    sets = list(args.sets())
    sets += [f"api={api}"] if api else []
    loaded = loaded_scenario(scenario, sets, allow_files_outside=allow_files_outside)
    loaded = with_load_sweep(loaded, load)
    opts = with_slo(opts, parsed_slo(slo) if slo is not None else ())

    run_dir = execute(plan(loaded, run_seed=opts.run_seed), opts)
    report_run(run_dir, arm_tables)
    if strict and run_was_client_limited(run_dir):
        sys.exit(CLIENT_LIMITED_EXIT)


def ensure_ray(ray_address: str | None) -> None:
    """With --ray, Ray must import: one line (exit 1) before anything is created or sent."""
    if ray_address:
        try:
            import_ray()
        except RayUnavailable as exc:
            raise click.ClickException(str(exc)) from None


class Stopped(KeyboardInterrupt):
    """SIGINT or SIGTERM stopped the run; `signal` says which (the exit code follows it)."""

    def __init__(self, sig: int) -> None:
        super().__init__(sig)
        self.signal = sig


def execute(the_plan: Plan, opts: RunOptions, interrupted: str = "") -> Path:
    """Runs the plan and returns its run directory (execute_work says how it ends)."""
    return execute_work(plan_work(the_plan, opts), interrupted)


# Work that writes one run directory, told where to warn, whom to tell the directory's path
# before anything is sent, and where its progress lines go.
Work = Callable[[Hooks], Coroutine[Any, Any, Path]]


def plan_work(the_plan: Plan, opts: RunOptions, name: str | None = None) -> Work:
    """run_plan as work (its `name`: see run_plan)."""
    return lambda hooks: run_plan(the_plan, opts, hooks.warn, hooks.on_root, name=name)


# What a stopped run shows of its directory (None: none was made yet), and its last line.
OnStop = Callable[[Path | None], str]


def execute_work(work: Work, interrupted: str = "", on_stop: OnStop | None = None) -> Path:
    """Runs `work(hooks)` and returns its directory; work that cannot start is a
    one-line error. Ctrl-C or SIGTERM, on either clock, keeps every record written, prints the
    report of what was recorded (`on_stop`: the command's own) and exits 130 / 143
    (`interrupted` adds a hint to the default's last line)."""

    def warn(msg: str) -> None:
        click.echo(f"warning: {msg}", err=True)

    def say(line: str) -> None:
        click.echo(line, err=True)

    roots: list[Path] = []
    try:
        return uvloop.run(until_stopped(work(Hooks(warn, roots.append, say))))
    except ServerBootError as exc:
        # The first line says what failed; the server log's last lines below it say why.
        raise click.ClickException(str(exc).rstrip()) from None
    except (RunError, ClientError, PromptSizeError, RayUnavailable) as exc:
        raise click.ClickException(str(exc).splitlines()[0]) from None
    except OSError as exc:
        raise click.ClickException(one_line(exc)) from None
    except KeyboardInterrupt as exc:
        root = roots[0] if roots and roots[0].is_dir() else None
        said = f"interrupted: records written so far are kept{interrupted}"
        click.echo((on_stop or partial(report_stopped, said))(root), err=True)
        sys.exit(stop_exit_code(exc.signal if isinstance(exc, Stopped) else signal.SIGINT))


def _print_report(run_dir: Path) -> None:
    from loadgen.report.cmd import write_report

    click.echo(write_report(run_dir))


def report_stopped(
    said: str, run_dir: Path | None, show: Callable[[Path], object] = _print_report
) -> str:
    """`show` (the report) of what a stopped run recorded, then `said`, the stop's last line;
    a report that cannot be made (nothing recorded yet, a second Ctrl-C) is one line, and the
    records stay as they are."""
    if run_dir is None:
        return said
    try:
        show(run_dir)
    except KeyboardInterrupt:
        click.echo(f"no report: stopped again; `loadgen report {run_dir}` makes it", err=True)
    except Exception as exc:  # the stop is what the user needs to hear about, not this
        click.echo(f"no report of {run_dir}: {one_line(exc)}", err=True)
    click.echo(f"run directory: {run_dir}")
    return said


def run_was_client_limited(run_dir: Path) -> bool:
    return read_run(orjson.loads((run_dir / "summary.json").read_bytes())).client_limited


async def until_stopped(work: Coroutine[Any, Any, T]) -> T:
    """Awaits `work`; SIGINT or SIGTERM cancels it, so every in-flight stream unwinds through
    its own cancellation and keeps a `cancelled` record, then raises Stopped.
    (A KeyboardInterrupt raised by the signal itself lands in whatever code runs at that
    instant and lost that stream's record.)"""
    task = asyncio.current_task()
    assert task is not None

    stopped: int | None = None

    def stop(sig: int) -> None:
        nonlocal stopped
        if task.done():
            # The work ended while the loop closes: nothing to cancel, and the stop would go
            # unheard (the report written, exit 0, 2.5 s after a Ctrl-C). Out of the loop, as
            # a stop ends.
            raise Stopped(sig)
        if stopped is None:  # a second signal must not break the flush that follows the first
            stopped = sig
            task.cancel()

    install_stop_signals(stop)
    try:
        return await work
    except asyncio.CancelledError:
        if stopped is not None:
            raise Stopped(stopped) from None
        raise


def report_run(run_dir: Path, arm_tables: bool = False) -> None:
    """Prints the report (a sweep's arms' own tables with `arm_tables`); exits
    FAILED_STREAMS_EXIT, with a one-line summary, when any measured stream failed (a run that
    mostly failed is not a success)."""
    from loadgen.report.cmd import write_report

    try:
        click.echo(write_report(run_dir, arm_tables))
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        click.echo(
            f"Error: disk full writing the report of {run_dir}: its records are kept; free "
            f"space, then `loadgen report {run_dir}`",
            err=True,
        )
        sys.exit(REPORT_FAILED_EXIT)
    click.echo(f"run directory: {run_dir}")
    exit_if_failed(run_dir)


def exit_if_failed(run_dir: Path) -> None:
    """Exits FAILED_STREAMS_EXIT, with a one-line summary, when any measured stream of the run
    directory failed or has no record, or when it measured none."""
    records = measured_records(run_dir)
    summary = failure_summary(records) or unrecorded_summary(run_dir)
    summary = summary or ("" if records else nothing_measured(run_dir))
    if summary:
        click.echo(f"Error: {summary}", err=True)
        sys.exit(FAILED_STREAMS_EXIT)


def failure_summary(records: list[StreamRecord]) -> str | None:
    """'3 of 8 streams failed: http_500 x2, idle_timeout x1', or None when all were ok."""
    classes = Counter(r.error.cls for r in records if r.error)
    if not classes:
        return None
    parts = ", ".join(f"{cls} x{n}" for cls, n in classes.most_common())
    return f"{sum(classes.values())} of {len(records)} streams failed: {parts}"


def nothing_measured(run_dir: Path) -> str:
    """Why a run that ended measured no stream: a CI gate on exit 0 passed such a run, every
    rep of which was dropped for a dead cache."""
    checks = [
        c for d in arm_dirs(run_dir) or [run_dir] for c in read_manifest(d).cache_checks or ()
    ]
    dead = sum(c.verdict == "dead" for c in checks)
    why = (
        f": {dead} rep(s) not measured, their primed prefix never hit (!! CACHE DEAD)"
        if dead
        else ""
    )
    return f"no stream was measured{why}"


def unrecorded_summary(run_dir: Path, shown: int = 5) -> str:
    """One line naming the streams a dead client worker left without a record; "" if none."""
    manifests = [read_manifest(d) for d in arm_dirs(run_dir) or [run_dir]]
    lost = [i for m in manifests for i in (m.client or {}).get("streams_without_record", [])]
    if not lost:
        return ""
    more = f" and {len(lost) - shown} more" if len(lost) > shown else ""
    return (
        f"{len(lost)} stream(s) have no record: a client worker died before sending them "
        f"({', '.join(lost[:shown])}{more}; run.json client.streams_without_record has all)"
    )


def measured_records(run_dir: Path) -> list[StreamRecord]:
    """The measured streams of a run directory, or of every arm of a sweep directory."""
    return [
        r for d in arm_dirs(run_dir) or [run_dir] for r in read_streams(d) if r.phase == MEASURE
    ]
