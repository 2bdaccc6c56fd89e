"""`loadgen sim`: serve the simulated vLLM v1 engine over HTTP until SIGINT/SIGTERM.

Flag names are vLLM's, so a sweep that restarts a server with different flags can drive either.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import os
import signal
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from loadgen.lifeline import PARENT_PID_ENV
from loadgen.sim.engine import EngineConfig
from loadgen.sim.faults import parse_fault_options
from loadgen.sim.profile_file import resolve_step_profile
from loadgen.sim.profiles import SIM_PROFILES
from loadgen.sim.server import SimServerConfig, boot_lines, start_sim_server
from loadgen.sim.statlog import log_engine_stats, log_interval_s
from loadgen.simoptions import SIM_OPTIONS, SimOption, negated, owned

_DEFAULTS = EngineConfig()
_SERVER_DEFAULTS = SimServerConfig()
_ORPHAN_POLL_S = 0.5
F = TypeVar("F", bound=Callable[..., Any])


def _click_type(o: SimOption) -> Any:
    if o.lo is None and o.hi is None:
        return o.kind
    if o.kind is int:
        return click.IntRange(*o.int_bounds())
    return click.FloatRange(o.lo, o.hi)


def _click_option(o: SimOption) -> Callable[[F], F]:
    """One row of loadgen/simoptions.py as a click option, its default its owner's."""
    default = getattr(_DEFAULTS if o.owner == "engine" else _SERVER_DEFAULTS, o.name)
    flag = o.flags[0]
    decls = [f"{flag}/{negated(flag)}"] if o.kind is bool else [*o.flags, o.name]
    return click.option(
        *decls, type=_click_type(o), default=default, show_default=True, help=o.help
    )


def sim_options(command: F) -> F:
    """Every sim setting as an option of `command`, in the table's order."""
    for o in reversed(SIM_OPTIONS):
        command = _click_option(o)(command)
    return command


@click.command("sim")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True,
              help="0 picks a free port.")  # fmt: skip
@click.option("--model", default="loadgen-sim", show_default=True, help="Served model name.")
@click.option("--profile", default=_DEFAULTS.profile.name, show_default=True,
              metavar="NAME|FILE",
              help=f"Step-time profile: {', '.join(sorted(SIM_PROFILES))}, or a profile file "
                   "from `loadgen calibrate` (its request overhead too, unless "
                   "--request-overhead-s is given).")  # fmt: skip
@sim_options
@click.option("--fault", "faults", multiple=True, metavar="NAME[=VALUE]",
              help="Inject a fault: http500=P, http429=P, drop=P, stall=P, stall_s=S, "
                   "warm_mismatch=P, needle_miss=P, cache_dead, drift=PCT_PER_HOUR, max_waiting=N. "
                   "Repeatable.")  # fmt: skip
def sim(
    host: str, port: int, model: str, profile: str, faults: tuple[str, ...], **settings: Any
) -> None:
    """Serve a simulated vLLM v1 engine (OpenAI API, /metrics) until Ctrl-C."""
    try:
        fault_config = parse_fault_options(faults)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--fault") from None
    try:
        step, overhead = resolve_step_profile(profile)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--profile") from None
    ctx = click.get_current_context()
    if (
        overhead is not None
        and ctx.get_parameter_source("request_overhead_s") is ParameterSource.DEFAULT
    ):
        settings["request_overhead_s"] = overhead
    engine = dataclasses.replace(_DEFAULTS, profile=step, **owned(settings, "engine"))
    try:
        config = SimServerConfig(
            engine=engine, model=model, faults=fault_config, **owned(settings, "server")
        )
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    try:
        asyncio.run(_serve(config, host, port))
    except OSError as e:
        raise click.ClickException(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


async def _stop_when_orphaned(parent: int, stop: asyncio.Event) -> None:
    """Sets `stop` once the launching loadgen is gone (this process was re-parented): a sim
    must not outlive the run that started it, even where no parent-death signal exists."""
    while os.getppid() == parent:
        await asyncio.sleep(_ORPHAN_POLL_S)
    click.echo("INFO loadgen (the parent) is gone: shutting down")
    stop.set()


def _echo_flushed(line: str) -> None:
    """A log line out now: a launched sim's stdout is a file, read while the run goes on."""
    click.echo(line)
    sys.stdout.flush()


async def _serve(config: SimServerConfig, host: str, port: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    parent = os.environ.get(PARENT_PID_ENV, "")
    watch = (
        asyncio.create_task(_stop_when_orphaned(int(parent), stop)) if parent.isdigit() else None
    )
    for line in boot_lines(config):
        click.echo(line)
    async with start_sim_server(config, host, port) as server:
        # Everything built so far (vocabulary, engine, app) lives as long as the server: out of
        # the collector's reach, a full collection no longer stalls the engine's loop (42-52
        # ms pauses mid-ladder, seen as late first tokens, before this).
        gc.freeze()
        click.echo(f"Listening on {server.url}")
        sys.stdout.flush()
        stats = asyncio.create_task(
            log_engine_stats(server.state.engine, _echo_flushed, log_interval_s())
        )
        with contextlib.suppress(asyncio.CancelledError):
            await stop.wait()
        stats.cancel()
    if watch is not None:
        watch.cancel()
    click.echo("INFO Shutting down")
