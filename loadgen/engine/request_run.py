"""What `loadgen request` does once its options are read: COUNT salted prose streams at
CONCURRENCY (closed loop) to one server, in this process or split over workers, into a run
directory of the shared shape (its run.json carries a synthesized one-group scenario, so
`loadgen report` and `compare` read it like any run's), and the tables printed at the end."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import os
import shutil
import signal
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
from yarl import URL

from loadgen.analysis.inputs import RunInputs
from loadgen.analysis.selferror import CLIENT_LIMITED_EXIT, ClientLimits, crowding
from loadgen.analysis.summary import analyze
from loadgen.analysis.summary_types import read_run
from loadgen.client.endpoint import Timeouts
from loadgen.client.errors import ClientError, HTTPStatusError
from loadgen.client.lag import quiet_collector
from loadgen.client.loops import run_closed_loop, stream_at
from loadgen.client.openai import OpenAIClient
from loadgen.client.pool import ProcessPool, split_jobs
from loadgen.client.ray_pool import RayPool, RayUnavailable, import_ray
from loadgen.clock import ClockName, WallClock
from loadgen.engine.counters import pick_counter
from loadgen.engine.manifest import manifest_head
from loadgen.engine.preflight import ensure_fd_limit, served_model
from loadgen.engine.seeds import RunSeed
from loadgen.engine.spread import pool_manifest
from loadgen.engine.target import RunError, Target
from loadgen.records import RunDirectory, StreamRecord, install_stop_signals, stop_exit_code
from loadgen.redact import redact_url
from loadgen.report.banners import client_banner
from loadgen.report.request_tables import request_tables
from loadgen.report.text import render_rich
from loadgen.request import Api, StreamRequest
from loadgen.run_manifest import RunManifest, write_manifest
from loadgen.scenario.model import Closed, Group, PromptConfig, Scenario
from loadgen.scenario.plan import PromptSpec, salt_tags
from loadgen.scenario.prompts import BuiltPrompt, PromptBuilder
from loadgen.scenario.token_counter import PromptSizeError

# The one group of a request run, as its records and its synthesized scenario name it.
GROUP = "request"


@dataclass(frozen=True)
class RequestArgs:
    """`loadgen request`'s options, read and checked."""

    base_url: str
    api_key: str | None
    model: str | None
    api: Api
    prompt_tokens: int
    max_tokens: int
    count: int
    concurrency: int
    out: Path | None
    ignore_eos: bool
    timeouts: Timeouts
    seed: RunSeed
    workers: int
    ray_address: str | None
    strict: bool
    per_stream: bool


@dataclass
class RequestOutcome:
    records: list[StreamRecord] = field(default_factory=list)
    model: str = ""
    sizing: str = ""
    token_counter: str | None = None
    started: dt.datetime | None = None
    start_perf_ns: int | None = None  # the run clock's zero on perf_counter_ns, as `run` writes
    interrupted: bool = False
    stop_signal: int = signal.SIGINT  # which stop, when interrupted (the exit code says it)
    client: dict[str, Any] = field(default_factory=dict)  # run.json's `client`: who sent


def request_scenario(args: RequestArgs) -> Scenario:
    """The scenario a request run is, stated as one: one group of salted prose prompts in a
    closed loop, so its run.json reads as every run's does."""
    group = Group(GROUP, args.count, PromptConfig(args.prompt_tokens, "prose", "salted"),
                  args.max_tokens, ignore_eos=args.ignore_eos)  # fmt: skip
    return Scenario(
        name="request",
        seed=args.seed.value,
        groups=(group,),
        arrival=Closed(args.concurrency, count=args.count),
        description=f"loadgen request: {args.count} salted prose prompts of "
        f"{args.prompt_tokens} tokens, {args.max_tokens} out, {args.concurrency} in flight",
        api=args.api,
        model=args.model,
        timeouts=args.timeouts,
    )


def run_request(args: RequestArgs) -> None:
    """Sends the streams, prints the tables; exits non-zero as `loadgen run` does."""
    if args.ray_address:
        try:
            import_ray()
        except RayUnavailable as exc:
            raise click.ClickException(str(exc)) from None
    try:
        ensure_fd_limit(args.concurrency)
        outcome = uvloop.run(_send_all(args))
    except (ClientError, RayUnavailable, RunError) as exc:
        raise click.ClickException(str(exc)) from None
    summary = request_summary(args, outcome)
    limits = client_limits(summary, args)
    banner = client_banner(limits)
    if banner:
        click.echo(banner)
    click.echo(_report(outcome, args, summary), nl=False)
    if outcome.interrupted:
        done = sum(r.error is None or r.error.cls != "cancelled" for r in outcome.records)
        click.echo(f"interrupted: {done} of {args.count} streams finished", err=True)
        raise click.exceptions.Exit(stop_exit_code(outcome.stop_signal))
    failures = failure_summary(outcome.records)
    if failures:
        raise click.ClickException(failures)
    if limits.limits_run and args.strict:
        raise click.exceptions.Exit(CLIENT_LIMITED_EXIT)


def request_summary(args: RequestArgs, outcome: RequestOutcome) -> dict[str, Any]:
    """summary.json of the request's records, as `loadgen report` computes it from the
    directory: its verdicts judge each stream's timing error once for both."""
    manifest = _manifest(args, outcome, finished=not outcome.interrupted)
    return analyze(RunInputs(manifest, outcome.records, [])).summary


def client_limits(summary: dict[str, Any], args: RequestArgs) -> ClientLimits:
    """The run's client limits as analysis judged them, with the host's crowding, which only
    the sending process can see (its cores and workers)."""
    judged = read_run(summary).client_limits
    assert judged is not None  # a request is one run, never a sweep
    crowded = crowding(URL(args.base_url).host, args.workers, os.cpu_count() or 1)
    return dataclasses.replace(judged, crowding=crowded)


def failure_summary(records: list[StreamRecord]) -> str | None:
    """'3 of 8 streams failed: http_500 x2, idle_timeout x1', or None when all were ok."""
    classes = Counter(r.error.cls for r in records if r.error)
    if not classes:
        return None
    parts = ", ".join(f"{cls} x{n}" for cls, n in classes.most_common())
    return f"{sum(classes.values())} of {len(records)} streams failed: {parts}"


def _report(outcome: RequestOutcome, args: RequestArgs, summary: dict[str, Any]) -> str:
    head = (
        f"{redact_url(args.base_url)}  model {outcome.model}  api {args.api}"
        f"  prompt ~{args.prompt_tokens} tokens ({outcome.sizing})"
    )
    tables = request_tables(outcome.records, summary, per_stream=args.per_stream)
    # Piped output gets a wide fixed width: an 80-column default truncates the tables.
    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else 160
    return render_rich(tables, [head], width=width)


async def _send_all(args: RequestArgs) -> RequestOutcome:
    outcome = RequestOutcome()
    task = asyncio.current_task()
    assert task is not None

    def stop(sig: int) -> None:
        # Only the first signal cancels: a second one must not break the flush that follows.
        if not outcome.interrupted:
            outcome.interrupted, outcome.stop_signal = True, sig
            task.cancel()

    install_stop_signals(stop)
    run_dir = RunDirectory(args.out, metrics=False) if args.out else None

    def keep(rec: StreamRecord) -> None:
        outcome.records.append(rec)
        if run_dir:
            run_dir.append_stream(rec)

    try:
        async with OpenAIClient(
            args.base_url, api_key=args.api_key, concurrency=args.concurrency,
            timeouts=args.timeouts,
        ) as client:  # fmt: skip
            try:
                await _launch(client, args, outcome, run_dir, keep)
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
                write_manifest(run_dir.path, _manifest(args, outcome, finished=True))
            run_dir.close()
    return outcome


async def _launch(
    client: OpenAIClient,
    args: RequestArgs,
    outcome: RequestOutcome,
    run_dir: RunDirectory | None,
    keep: Callable[[StreamRecord], None],
) -> None:
    outcome.model = await _served_model(client, args.model)
    prompts, counter, outcome.sizing = await request_prompts(
        client, outcome.model, args.count, args.prompt_tokens, chat=args.api == "chat",
        seed=args.seed.value,
    )  # fmt: skip
    outcome.token_counter = counter
    requests = [
        StreamRequest(
            id=f"r{i:04d}",
            model=outcome.model,
            prompt=p.text,
            max_tokens=args.max_tokens,
            api=args.api,
            group=GROUP,
            ignore_eos=args.ignore_eos,
            requested_prompt_tokens=args.prompt_tokens,
            cache_salt=salt,
        )
        for i, (p, salt) in enumerate(prompts)
    ]
    await client.warm(min(args.concurrency, args.count))
    quiet_collector()
    client.run_start_ns = perf_counter_ns()
    outcome.started = dt.datetime.now(dt.UTC)
    outcome.start_perf_ns = client.run_start_ns
    outcome.client = pool_manifest(None, args.workers)

    def mark() -> None:
        if run_dir:
            write_manifest(run_dir.path, _manifest(args, outcome, finished=False))

    mark()
    if args.workers == 1 and not args.ray_address:
        clock = WallClock(client.run_start_ns)
        await run_closed_loop(
            requests, stream_at(client), keep, clock, concurrency=args.concurrency
        )
        return
    jobs = split_jobs(requests, args.concurrency, args.workers)
    seats = max(j.concurrency or 1 for j in jobs)
    if args.ray_address:
        async with RayPool(
            args.ray_address, len(jobs), base_url=args.base_url, api_key=client.api_key,
            seats=seats, timeouts=client.timeouts, run_start_ns=client.run_start_ns,
        ) as ray:  # fmt: skip
            outcome.client = pool_manifest(ray, args.workers)
            mark()  # the actors' nodes, recorded before a stream is sent
            _warn_all(await ray.run(jobs, keep))
            outcome.client = pool_manifest(ray, args.workers)
        return
    with _spill_dir(run_dir) as spill:
        async with ProcessPool(
            len(jobs), base_url=args.base_url, api_key=client.api_key, seats=seats,
            timeouts=client.timeouts, run_start_ns=client.run_start_ns, spill_dir=spill,
        ) as pool:  # fmt: skip
            _warn_all(await pool.run(jobs, keep))
            outcome.client = pool_manifest(pool, args.workers)  # with streams no worker recorded


def _warn_all(lines: list[str]) -> None:
    for line in lines:
        click.echo(f"warning: {line}", err=True)


async def request_prompts(
    client: OpenAIClient, model: str, count: int, tokens: int, *, chat: bool, seed: int
) -> tuple[list[tuple[BuiltPrompt, str]], str, str]:
    """`count` prose prompts of `tokens` tokens with their salts, each salted at its start from
    `seed` (no stream can hit another's cached blocks, nor an earlier invocation's unless it
    had the same seed), the token counter's method and how they were sized, in words."""

    def warn(msg: str) -> None:
        click.echo(f"warning: {msg}", err=True)

    counter = await pick_counter(client, model, chat=chat, chat_template_kwargs=None, warn=warn)
    builder = PromptBuilder(counter)
    salts = salt_tags(seed, GROUP, count)
    specs = [
        PromptSpec(tokens, "prose", "salted", salt, text_seed=i) for i, salt in enumerate(salts)
    ]
    prompts = [(await _build_salted(builder, spec), spec.salt) for spec in specs]
    label = (
        "exact, sized by /tokenize" if counter.method == "tokenize" else "estimated: no /tokenize"
    )
    return prompts, counter.method, label


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


async def _served_model(client: OpenAIClient, wanted: str | None) -> str:
    """--model checked against /v1/models (default: its first); a server without /v1/models
    (HTTP 4xx/5xx) is sent --model unchecked."""
    try:
        listing = await client.get_json("/v1/models")
    except HTTPStatusError:
        if wanted is None:
            raise
        return wanted
    return served_model(listing, wanted, client.base_url)


def _remove_stop_signals() -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.remove_signal_handler(sig)


def _manifest(args: RequestArgs, outcome: RequestOutcome, *, finished: bool) -> RunManifest:
    """run.json in `loadgen run`'s shape: an external target by URL, the streams planned, who
    sent them; `interrupted` stays true until the last stream is in."""
    started = outcome.started or dt.datetime.now(dt.UTC)
    target = Target(args.base_url, "external", outcome.model)
    head = manifest_head(request_scenario(args), args.seed, started, None, ClockName.WALL)
    return head.add(
        target.part(),
        command="request",
        model=outcome.model,
        planned_streams=args.count,
        token_counter=outcome.token_counter,
        prompt_shapes={GROUP: "prose"},
        prompt_sizing=outcome.sizing,
        run_start_perf_ns=outcome.start_perf_ns,
        interrupted=outcome.interrupted or not finished,
        client=outcome.client | {"concurrency_pool": args.concurrency},
        finished_wall=dt.datetime.now(dt.UTC).isoformat() if finished else None,
    )


@contextlib.contextmanager
def _spill_dir(run_dir: RunDirectory | None) -> Iterator[Path]:
    """Where workers spill their records: the run directory's workers/ (kept when a worker
    died), or a temporary folder when there is no run directory."""
    if run_dir is not None:
        yield run_dir.path / "workers"
        return
    with tempfile.TemporaryDirectory(prefix="loadgen-workers-") as tmp:
        yield Path(tmp)
