"""Helpers of the real-server tests: a server per test module, a client on the run clock,
metric scrapes through the project's own poller, and the numbers each run measured."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from loadgen.analysis.summary import analyze_run
from loadgen.client.openai import OpenAIClient
from loadgen.codec import to_json
from loadgen.engine.poller import MetricsPoller
from loadgen.engine.run import RunOptions, run_plan
from loadgen.exposition import parse_exposition
from loadgen.records import MetricsSample
from loadgen.report.cmd import write_report
from loadgen.scenario.load import load_scenario
from loadgen.scenario.plan import plan
from loadgen.server import installs
from loadgen.server.launcher import Server, launch_sync
from loadgen.server.spec import ServerSpec

from support.paths import DATA

# (what, value) measured by the tests; conftest prints them at the end of the run.
NUMBERS: list[tuple[str, str]] = []


def run_options(server: Server, out_root: Path, run_seed: int | None = None) -> RunOptions:
    """Options for a run against a server the launcher started: its URL and model, and the
    limits it read back (each with its source), so verdicts judge against the real cap."""
    facts = {k: v for k, v in to_json(server.facts).items() if isinstance(v, int)}
    return RunOptions(
        base_url=server.url, model=server.model, out_root=out_root, run_seed=run_seed,
        progress=False, server_facts=facts, server_facts_sources=dict(server.facts.sources),
    )  # fmt: skip


async def run_on(
    server: Server,
    scenario: Path,
    out_root: Path,
    overrides: Sequence[str] = (),
    run_seed: int | None = None,
) -> Path:
    """Runs the scenario (with `--set` style overrides) against the server; returns the run
    directory with its report written. A boot keeps its prefix cache between runs, and salts
    derive from the run seed: a second run on one boot needs a seed of its own."""
    scn = load_scenario(scenario, list(overrides))
    opts = run_options(server, out_root, run_seed)
    run_dir = await run_plan(plan(scn, run_seed=run_seed), opts, warn=print)
    write_report(run_dir)
    return run_dir


def note(name: str, value: str) -> None:
    """Keeps a measured number for the summary at the end of the run."""
    NUMBERS.append((name, value))


def tiny_model(profile: str) -> Path:
    """The tests' tiny model in the profile's format (a real server has no default model)."""
    return installs.tiny_gguf() if profile == "llama.cpp" else installs.tiny_model_dir()


@contextlib.contextmanager
def running(profile: str, flags: list[str], log_dir: Path) -> Iterator[Server]:
    """A server for one test module; its boot time goes into the summary."""
    with launch_sync(profile, flags=flags, log_dir=log_dir, model=tiny_model(profile)) as server:
        note(
            f"{profile} {' '.join(flags)} boot", f"{server.boot_ns / 1e9:.1f} s ({server.log_path})"
        )
        yield server


# The (profile, flags) of boots that several modules share (their `SHARED_BOOT`).
PREFIX_CACHING_BOOT = ("vllm", ("--enable-prefix-caching",))
PLAIN_BOOT: tuple[str, tuple[str, ...]] = ("vllm", ())


class SharedBoots:
    """The boots that test modules asking for the same profile and flags share: a vLLM CPU boot
    costs 15-20 s, and five modules asked for two flag sets (the replicas module for two
    servers of one set). One set is up at a time: conftest orders the modules so that those
    sharing a set run in a row, and asking for another set stops the one up. A module on a
    shared boot finds the cache of those before it: each sends prompts of its own (salted or
    seeded apart) and reads the server's counters as deltas over its own requests."""

    def __init__(self, tmp: pytest.TempPathFactory) -> None:
        self._tmp = tmp
        self._stack = contextlib.ExitStack()
        self._key: tuple[str, tuple[str, ...]] | None = None
        self._servers: list[Server] = []

    def servers(self, profile: str, flags: Sequence[str], count: int = 1) -> list[Server]:
        """`count` running servers of the profile and flags (the first ones already up)."""
        key = (profile, tuple(flags))
        if key != self._key:
            self.close()
            self._key = key
        while len(self._servers) < count:
            log_dir = self._tmp.mktemp(profile)
            self._servers.append(self._stack.enter_context(running(profile, [*flags], log_dir)))
        return self._servers[:count]

    def close(self) -> None:
        self._stack.close()
        self._key, self._servers = None, []


def client(server: Server, concurrency: int = 8) -> OpenAIClient:
    return OpenAIClient(server.url, concurrency=concurrency, run_start_ns=time.perf_counter_ns())


async def scrape(c: OpenAIClient) -> dict[str, float]:
    """The server's metrics by canonical name (llama.cpp's mapped onto vLLM's)."""
    return parse_exposition(await c.get_text("/metrics")).values


async def counter_reaching(
    c: OpenAIClient, name: str, target: float, timeout_s: float = 10.0
) -> float:
    """The counter's value once it reaches `target` (the server may count a stream's last
    tokens just after the stream ends), or its value when the timeout passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = (await scrape(c)).get(name, 0.0)
        if value >= target or time.monotonic() > deadline:
            return value
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def polling(c: OpenAIClient, interval_s: float = 0.025) -> AsyncIterator[list[MetricsSample]]:
    """Scrapes /metrics on the project's poller for the duration of the block."""
    samples: list[MetricsSample] = []
    poller = MetricsPoller(
        lambda: c.get_text("/metrics"),
        samples.append,
        interval_s=interval_s,
        run_start_ns=c.run_start_ns,
    )
    task = asyncio.create_task(poller.run())
    try:
        yield samples
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def running_waiting(samples: list[MetricsSample]) -> set[tuple[int, int]]:
    """The distinct (running, waiting) pairs the polls saw."""
    return {
        (int(s.values["num_requests_running"]), int(s.values["num_requests_waiting"]))
        for s in samples
        if "num_requests_running" in s.values and "num_requests_waiting" in s.values
    }


UNIFORM = DATA / "scenarios" / "verdict_uniform.yaml"
# Four salted 500-token prompts sent together, 200 tokens out each, polled every 50 ms.
UNIFORM_SET = ("groups.streams.prompt.tokens=500", "metrics.poll_interval_s=0.05")


async def run_uniform(server: Server, out: Path, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The summary of four uniform streams run through run_plan against the server."""
    return analyze_run(await run_on(server, UNIFORM, out, [*UNIFORM_SET, *overrides])).summary


def assert_two_waited_on_the_cap(summary: dict[str, Any], cap_source: str) -> None:
    """Cap 2 from the launch (`cap_source`), four streams: the two that waited longest for a
    first token, and only they, are `admission_cap`, with polls showing 2 running and some
    waiting (the other two may have waited on each other's prefill)."""
    assert summary["run"]["cap"] == {"value": 2, "source": cap_source}
    streams = sorted(summary["streams"], key=lambda s: (s["ttft_s"], s["id"]))
    assert [s["completion_tokens"] for s in streams] == [200] * 4
    capped = [s["verdict"] == "admission_cap" for s in streams]
    assert capped == [False, False, True, True], verdict_line(summary)
    for s in streams[2:]:
        evidence = s["evidence"]
        assert (evidence["cap"], evidence["cap_source"]) == (2, cap_source)
        polls = evidence["samples"]
        assert any(p.get("running") == 2 and p.get("waiting", 0) >= 1 for p in polls), polls


def verdict_line(summary: dict[str, Any]) -> str:
    """Each stream's verdict and TTFT, in TTFT order."""
    streams = sorted(summary["streams"], key=lambda s: (s["ttft_s"] or 0.0, s["id"]))
    return ", ".join(
        f"{s['group']}/{s['id'].rsplit('/', 1)[-1]} {s['verdict']} {s['ttft_s']:.3f} s"
        for s in streams
    )


async def run_launched(spec: ServerSpec, scenario: str, out_root: Path) -> Path:
    """`scenario` (YAML text) run on a server the run launches from `spec`; its run directory."""
    path = out_root / "scenario.yaml"
    path.write_text(scenario)
    opts = RunOptions(out_root=out_root, progress=False, server=spec, telemetry=False)
    return await run_plan(plan(load_scenario(path)), opts, warn=print)
