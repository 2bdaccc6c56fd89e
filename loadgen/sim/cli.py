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

import click

from loadgen.lifeline import PARENT_PID_ENV
from loadgen.sim.engine import EngineConfig
from loadgen.sim.faults import parse_fault_options
from loadgen.sim.profiles import MAX_SIM_BLOCKS, SIM_PROFILES, SIM_SPEED, sim_profile
from loadgen.sim.server import SimServerConfig, boot_lines, start_sim_server

_DEFAULTS = EngineConfig()
_ORPHAN_POLL_S = 0.5


@click.command("sim")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True,
              help="0 picks a free port.")  # fmt: skip
@click.option("--model", default="loadgen-sim", show_default=True, help="Served model name.")
@click.option("--profile", type=click.Choice(sorted(SIM_PROFILES)), default="tiny",
              show_default=True, help="Step-time profile.")  # fmt: skip
@click.option("--max-num-seqs", type=click.IntRange(min=1), default=_DEFAULTS.max_num_seqs,
              show_default=True)  # fmt: skip
@click.option("--max-num-batched-tokens", type=click.IntRange(min=1),
              default=_DEFAULTS.max_num_batched_tokens, show_default=True)  # fmt: skip
@click.option("--block-size", type=click.IntRange(min=1), default=_DEFAULTS.block_size,
              show_default=True)  # fmt: skip
@click.option("--num-gpu-blocks", "--num-gpu-blocks-override", "num_gpu_blocks",
              type=click.IntRange(1, MAX_SIM_BLOCKS), default=_DEFAULTS.num_gpu_blocks,
              show_default=True, help="KV pool size in blocks.")  # fmt: skip
@click.option("--enable-prefix-caching/--no-enable-prefix-caching",
              default=_DEFAULTS.enable_prefix_caching, show_default=True)  # fmt: skip
@click.option("--long-prefill-token-threshold", type=click.IntRange(min=0),
              default=_DEFAULTS.long_prefill_token_threshold, show_default=True,
              help="Cap on one request's prefill chunk per step (0 = off).")  # fmt: skip
@click.option("--num-speculative-tokens", type=click.IntRange(min=0),
              default=_DEFAULTS.num_speculative_tokens, show_default=True)  # fmt: skip
@click.option("--acceptance-rate", type=click.FloatRange(0.0, 1.0),
              default=_DEFAULTS.acceptance_rate, show_default=True)  # fmt: skip
@click.option("--max-model-len", type=click.IntRange(min=1), default=8192, show_default=True)
@click.option("--speed", type=click.FloatRange(*SIM_SPEED), default=1.0,
              show_default=True, help="Time factor: 2 runs the engine twice as fast.")  # fmt: skip
@click.option("--request-overhead-s", type=click.FloatRange(min=0.0),
              default=_DEFAULTS.request_overhead_s, show_default=True,
              help="Engine seconds before each request is scheduled (a TTFT floor).")  # fmt: skip
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--reasoning-tokens", type=click.IntRange(min=0), default=0, show_default=True,
              help="Chat answers open with N reasoning deltas (delta.reasoning), as vLLM's "
                   "reasoning parser emits a thinking model's output.")  # fmt: skip
@click.option("--fault", "faults", multiple=True, metavar="NAME[=VALUE]",
              help="Inject a fault: http500=P, http429=P, drop=P, stall=P, stall_s=S, "
                   "warm_mismatch=P, needle_miss=P, cache_dead, drift=PCT_PER_HOUR, max_waiting=N. "
                   "Repeatable.")  # fmt: skip
def sim(
    host: str,
    port: int,
    model: str,
    profile: str,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    block_size: int,
    num_gpu_blocks: int,
    enable_prefix_caching: bool,
    long_prefill_token_threshold: int,
    num_speculative_tokens: int,
    acceptance_rate: float,
    max_model_len: int,
    speed: float,
    request_overhead_s: float,
    seed: int,
    reasoning_tokens: int,
    faults: tuple[str, ...],
) -> None:
    """Serve a simulated vLLM v1 engine (OpenAI API, /metrics) until Ctrl-C."""
    try:
        fault_config = parse_fault_options(faults)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--fault") from None
    engine = dataclasses.replace(
        _DEFAULTS,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        block_size=block_size,
        num_gpu_blocks=num_gpu_blocks,
        enable_prefix_caching=enable_prefix_caching,
        long_prefill_token_threshold=long_prefill_token_threshold,
        num_speculative_tokens=num_speculative_tokens,
        acceptance_rate=acceptance_rate,
        profile=sim_profile(profile),
        seed=seed,
        request_overhead_s=request_overhead_s,
    )
    try:
        config = SimServerConfig(
            engine=engine,
            model=model,
            max_model_len=max_model_len,
            speed=speed,
            faults=fault_config,
            reasoning_tokens=reasoning_tokens,
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
        with contextlib.suppress(asyncio.CancelledError):
            await stop.wait()
    if watch is not None:
        watch.cancel()
    click.echo("INFO Shutting down")
