"""`loadgen request`: fire COUNT streams at CONCURRENCY (closed loop) and show each one."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import os
import signal
import statistics
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter_ns
from typing import Any

import click
import uvloop
from rich.console import Console
from rich.table import Table
from yarl import URL

from loadgen import __version__
from loadgen.analysis.benchmark import benchmark_block
from loadgen.analysis.rates import decode_tok_s, ttft_s
from loadgen.analysis.selferror import (
    CLIENT_LIMITED_EXIT,
    client_banner,
    crowding_reason,
    error_bound_s,
    limited_records,
)
from loadgen.client.endpoint import Timeouts, resolve_target
from loadgen.client.errors import ClientError
from loadgen.client.lag import quiet_collector
from loadgen.client.loops import run_closed_loop
from loadgen.client.openai import OpenAIClient
from loadgen.client.pool import ProcessPool, split_jobs
from loadgen.client.ray_pool import RayPool, RayUnavailable, import_ray
from loadgen.engine.counters import pick_counter
from loadgen.engine.preflight import ensure_fd_limit
from loadgen.engine.seeds import SEED_TYPE, fresh_seed
from loadgen.engine.target import RunError
from loadgen.records import RunDirectory, StreamRecord, install_stop_signals, stop_exit_code
from loadgen.report.bench_tables import benchmark_tables
from loadgen.report.tables import to_rich
from loadgen.request import StreamRequest
from loadgen.scenario.limits import MAX_PROMPT_TOKENS, MAX_STREAMS, client_problems
from loadgen.scenario.plan import PromptSpec, salt_tags
from loadgen.scenario.prompts import BuiltPrompt, PromptBuilder, PromptSizeError


@dataclass
class ProbeOutcome:
    records: list[StreamRecord] = field(default_factory=list)
    model: str = ""
    sizing: str = ""
    start_wall: str = ""
    start_perf_ns: int | None = None  # the run clock's zero on perf_counter_ns, as `run` writes
    interrupted: bool = False
    stop_signal: int = signal.SIGINT  # which stop, when interrupted (the exit code says it)
    ray: dict[str, Any] | None = None  # run.json's `ray` section under --ray


@click.command("request")
@click.option("--base-url", help="Server root, with or without /v1 (or OPENAI_BASE_URL).")
@click.option("--api-key", help="Bearer key (or OPENAI_API_KEY).")
@click.option("--model", help="Model id; default: the first one /v1/models lists.")
@click.option("--api", type=click.Choice(["completions", "chat"]), default="completions")
@click.option(
    "--prompt-tokens", type=click.IntRange(1, MAX_PROMPT_TOKENS), default=100, show_default=True
)
@click.option("--max-tokens", type=click.IntRange(1), default=128, show_default=True)
@click.option("-n", "--count", type=click.IntRange(1, MAX_STREAMS), default=1, show_default=True)
@click.option("-c", "--concurrency", type=click.IntRange(1), default=1, show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="Run directory.")
@click.option("--ignore-eos/--no-ignore-eos", default=True, show_default=True)
@click.option("--first-byte-timeout", type=click.FloatRange(min=0, min_open=True), default=600.0)
@click.option("--idle-timeout", type=click.FloatRange(min=0, min_open=True), default=60.0)
@click.option(
    "--seed",
    type=SEED_TYPE,
    default=None,
    help="Seed of the prompt salts (default: fresh per invocation, so no stream hits the "
    "cache an earlier one left; recorded in run.json).",
)
@click.option(
    "--workers",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="Processes to split the streams across (each its own event loop and core).",
)
@click.option(
    "--ray",
    "ray_address",
    metavar="ADDRESS",
    help="Run the --workers as Ray actors spread over the cluster at ADDRESS (auto, "
    "HOST:PORT, ray://HOST:PORT, or local); needs pip install 'loadgen[ray]'.",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Exit 3 when any stream was client_limited (loadgen's own error above tolerance).",
)
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
def request_cmd(**opts: Any) -> None:
    """Fire COUNT streams at CONCURRENCY and print TTFT, decode-only tok/s, tokens and chunks."""
    opts["seed_source"] = "fresh" if opts["seed"] is None else "user"
    if opts["seed"] is None:
        opts["seed"] = fresh_seed()
    try:
        base_url, api_key = resolve_target(opts["base_url"], opts["api_key"])
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    problems = client_problems(opts["workers"], opts["ray_address"])
    if problems:
        raise click.UsageError("; ".join(problems))
    if opts["ray_address"]:
        try:
            import_ray()
        except RayUnavailable as exc:
            raise click.ClickException(str(exc)) from None
    try:
        ensure_fd_limit(opts["concurrency"])
    except RunError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        outcome = uvloop.run(_probe(base_url, api_key, opts))
    except (ClientError, RayUnavailable) as exc:
        raise click.ClickException(str(exc)) from None
    # Piped output gets a wide fixed width: rich's 80-column default truncates the tables.
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    limited = limited_records(outcome.records)
    crowded = crowding_reason(URL(base_url).host, opts["workers"], os.cpu_count() or 1)
    reasons = [crowded] if crowded else []
    banner = client_banner(len(limited), len(outcome.records), reasons)
    if banner:
        console.print(banner, markup=False)
    _print_tables(console, outcome, base_url, opts)
    if outcome.interrupted:
        done = sum(r.error is None or r.error.cls != "cancelled" for r in outcome.records)
        click.echo(f"interrupted: {done} of {opts['count']} streams finished", err=True)
        raise click.exceptions.Exit(stop_exit_code(outcome.stop_signal))
    summary = failure_summary(outcome.records)
    if summary:
        raise click.ClickException(summary)
    if (limited or reasons) and opts["strict"]:
        raise click.exceptions.Exit(CLIENT_LIMITED_EXIT)


def failure_summary(records: list[StreamRecord]) -> str | None:
    """'3 of 8 streams failed: http_500 x2, idle_timeout x1', or None when all were ok."""
    classes = Counter(r.error.cls for r in records if r.error)
    if not classes:
        return None
    parts = ", ".join(f"{cls} x{n}" for cls, n in classes.most_common())
    return f"{sum(classes.values())} of {len(records)} streams failed: {parts}"


async def _probe(base_url: str, api_key: str | None, opts: dict[str, Any]) -> ProbeOutcome:
    outcome = ProbeOutcome()
    task = asyncio.current_task()
    assert task is not None

    def stop(sig: int) -> None:
        # Only the first signal cancels: a second one must not break the flush that follows.
        if not outcome.interrupted:
            outcome.interrupted, outcome.stop_signal = True, sig
            task.cancel()

    install_stop_signals(stop)
    run_dir = RunDirectory(opts["out"], metrics=False) if opts["out"] else None
    timeouts = Timeouts(
        first_token_s=opts["first_byte_timeout"],
        idle_s=opts["idle_timeout"],
        total_s=opts["total_timeout"],
    )
    c = opts["concurrency"]

    def keep(rec: StreamRecord) -> None:
        outcome.records.append(rec)
        if run_dir:
            run_dir.append_stream(rec)

    try:
        async with OpenAIClient(
            base_url, api_key=api_key, concurrency=c, timeouts=timeouts
        ) as client:
            try:
                await _launch(client, base_url, opts, outcome, run_dir, keep)
            finally:
                for rec in client.take_cancelled():
                    keep(rec)
    except asyncio.CancelledError:
        if not outcome.interrupted:
            raise
        task.uncancel()
    finally:
        _remove_stop_signals()
        if run_dir:
            if outcome.model:
                run_dir.write_manifest(_manifest(base_url, opts, outcome))
            run_dir.close()
    return outcome


async def _launch(
    client: OpenAIClient,
    base_url: str,
    opts: dict[str, Any],
    outcome: ProbeOutcome,
    run_dir: RunDirectory | None,
    keep: Callable[[StreamRecord], None],
) -> None:
    outcome.model = opts["model"] or await _first_model(client)
    prompts, outcome.sizing = await probe_prompts(
        client, outcome.model, opts["count"], opts["prompt_tokens"], chat=opts["api"] == "chat",
        seed=opts["seed"],
    )  # fmt: skip
    requests = [
        StreamRequest(
            id=f"r{i:04d}",
            model=outcome.model,
            prompt=p.text,
            max_tokens=opts["max_tokens"],
            api=opts["api"],
            group="request",
            ignore_eos=opts["ignore_eos"],
            requested_prompt_tokens=opts["prompt_tokens"],
            cache_salt=salt,
        )
        for i, (p, salt) in enumerate(prompts)
    ]
    await client.warm(min(opts["concurrency"], opts["count"]))
    quiet_collector()
    client.run_start_ns = perf_counter_ns()
    outcome.start_wall = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    outcome.start_perf_ns = client.run_start_ns
    if run_dir:
        run_dir.write_manifest(_manifest(base_url, opts, outcome))
    if opts["ray_address"]:
        jobs = split_jobs(requests, opts["concurrency"], opts["workers"])
        async with RayPool(
            opts["ray_address"], len(jobs), base_url=base_url, api_key=client.api_key,
            seats=max(j.concurrency or 1 for j in jobs), timeouts=client.timeouts,
            run_start_ns=client.run_start_ns,
        ) as pool:  # fmt: skip
            outcome.ray = pool.run_manifest()
            if run_dir:
                run_dir.write_manifest(_manifest(base_url, opts, outcome))
            for line in await pool.run(jobs, keep):
                click.echo(f"warning: {line}", err=True)
        return
    if opts["workers"] > 1:
        jobs = split_jobs(requests, opts["concurrency"], opts["workers"])
        with _spill_dir(run_dir) as spill:
            async with ProcessPool(
                len(jobs), base_url=base_url, api_key=client.api_key,
                seats=max(j.concurrency or 1 for j in jobs), timeouts=client.timeouts,
                run_start_ns=client.run_start_ns, spill_dir=spill,
            ) as pool:  # fmt: skip
                for line in await pool.run(jobs, keep):
                    click.echo(f"warning: {line}", err=True)
        return
    await run_closed_loop(
        requests, client, keep, concurrency=opts["concurrency"], run_start_ns=client.run_start_ns
    )


async def probe_prompts(
    client: OpenAIClient, model: str, count: int, tokens: int, *, chat: bool, seed: int
) -> tuple[list[tuple[BuiltPrompt, str]], str]:
    """`count` prose prompts of `tokens` tokens with their salts, each salted at its start from
    `seed` (no stream can hit another's cached blocks, nor an earlier invocation's unless it
    had the same seed), and how they were sized."""

    def warn(msg: str) -> None:
        click.echo(f"warning: {msg}", err=True)

    counter = await pick_counter(client, model, chat=chat, chat_template_kwargs=None, warn=warn)
    builder = PromptBuilder(counter)
    salts = salt_tags(seed, "request", count)
    specs = [
        PromptSpec(tokens, "prose", "salted", salt, text_seed=i) for i, salt in enumerate(salts)
    ]
    prompts = [(await _build_salted(builder, spec), spec.salt) for spec in specs]
    label = (
        "exact, sized by /tokenize" if counter.method == "tokenize" else "estimated: no /tokenize"
    )
    return prompts, label


async def _build_salted(builder: PromptBuilder, spec: PromptSpec) -> BuiltPrompt:
    """The prompt with its whole salt tag; one shorter than the tag keeps only the tag's first
    word (unique per stream of one invocation): a prompt that small spans no cache block, so
    it cannot hit one, and the full salt still goes out as cache_salt."""
    try:
        return await builder.build(spec)
    except PromptSizeError:
        short = dataclasses.replace(spec, salt=spec.salt.split("-")[0])
        try:
            return await builder.build(short)
        except PromptSizeError as exc:
            raise click.UsageError(f"--prompt-tokens {spec.tokens}: {exc}") from None


async def _first_model(client: OpenAIClient) -> str:
    listing = await client.get_json("/v1/models")
    try:
        return str(listing["data"][0]["id"])
    except (KeyError, IndexError, TypeError):
        raise ClientError("GET /v1/models listed no model: pass --model") from None


def _remove_stop_signals() -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.remove_signal_handler(sig)


def _manifest(base_url: str, opts: dict[str, Any], outcome: ProbeOutcome) -> dict[str, Any]:
    args = {k: str(v) if isinstance(v, Path) else v for k, v in opts.items() if k != "api_key"}
    return {
        "tool": "loadgen",
        "version": __version__,
        "command": "request",
        "target": base_url,
        "planned_streams": opts["count"],
        "model": outcome.model,
        "seed": opts["seed"],
        "seed_source": opts["seed_source"],
        "args": args,
        "prompt_sizing": outcome.sizing,
        "start_wall": outcome.start_wall,
        "run_start_perf_ns": outcome.start_perf_ns,
        "interrupted": outcome.interrupted,
        **({"ray": outcome.ray} if outcome.ray else {}),
    }


def _print_tables(
    console: Console, outcome: ProbeOutcome, base_url: str, opts: dict[str, Any]
) -> None:
    sizing = outcome.sizing
    console.print(
        f"{base_url}  model {outcome.model}  api {opts['api']}  prompt ~{opts['prompt_tokens']}"
        f" tokens ({sizing})"
    )
    if not outcome.records:
        return
    # 2,048 rows on an H200 buried the summary: rows only when asked, or for the failures.
    shown = [r for r in outcome.records if opts.get("per_stream") or r.status != "ok"]
    if shown:
        console.print(_stream_rows(shown))
    ok = [r for r in outcome.records if r.status == "ok"]
    if not ok:
        return
    summary = Table("over ok streams", "min", "median", "max")
    series: dict[str, list[float]] = {
        "TTFT ms": [t * 1e3 for r in ok if (t := ttft_s(r)) is not None],
        "RTT ms": [r.rtt_us / 1e3 for r in ok if r.rtt_us is not None],
        "decode tok/s": [d for r in ok if (d := decode_tok_s(r)) is not None],
        "tokens": [r.completion_tokens for r in ok],
        "chunks": [r.chunks for r in ok],
    }
    for name, xs in series.items():
        if xs:
            summary.add_row(name, _fmt(min(xs)), _fmt(statistics.median(xs)), _fmt(max(xs)))
    console.print(summary)
    for table in benchmark_tables(benchmark_block(outcome.records)):
        console.print(to_rich(table))


def _stream_rows(records: list[StreamRecord]) -> Table:
    """One row per stream, sorted by id."""
    # RTT beside TTFT: the kernel's smoothed round trip of the stream's connection, the
    # network's share, so a reader can tell server time from transit.
    per = Table("stream", "status", "TTFT ms", "RTT ms", "decode tok/s", "prompt", "tokens",
                "chunks", "token source", "client err ms", "error")  # fmt: skip
    for r in sorted(records, key=lambda r: r.id):
        t, d = ttft_s(r), decode_tok_s(r)
        per.add_row(
            r.id,
            r.status,
            _fmt(t and t * 1e3),
            "-" if r.rtt_us is None else f"{r.rtt_us / 1e3:.3f}",
            _fmt(d),
            _fmt(r.prompt_tokens),
            str(r.completion_tokens),
            str(r.chunks),
            r.token_source + (" (chunks!)" if r.token_source == "chunk_count" else ""),
            _fmt(b and b * 1e3) if (b := error_bound_s(r)) is not None else "-",
            f"{r.error.cls}: {r.error.message}" if r.error else "",
        )
    return per


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.1f}" if isinstance(x, float) else str(x)


@contextlib.contextmanager
def _spill_dir(run_dir: RunDirectory | None) -> Iterator[Path]:
    """Where workers spill their records: the run directory's workers/ (kept when a worker
    died), or a temporary folder when there is no run directory."""
    if run_dir is not None:
        yield run_dir.path / "workers"
        return
    with tempfile.TemporaryDirectory(prefix="loadgen-workers-") as tmp:
        yield Path(tmp)
