"""Shared by the sim server tests: prompts of exact token counts, /metrics and truth readers,
and `loadgen run` of a shrunk whale_c4 against a sim over loopback."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from loadgen.engine.run import RunOptions, run_plan
from loadgen.request import StreamRequest
from loadgen.scenario.load import load_scenario
from loadgen.scenario.plan import plan
from loadgen.sim.engine import EngineConfig
from loadgen.sim.faults import FaultConfig
from loadgen.sim.profiles import StepProfile, sim_profile
from loadgen.sim.server import SimServer, SimServerConfig, ground_truth_rows

MODEL = "loadgen-sim"
# One pseudo-word of the sim's vocabulary: " bako" * n is exactly n prompt tokens.
WORD = " bako"
# Prefill-heavy steps (40 us per scheduled token over a 4 ms floor), so a 512- or 2048-token
# chunk is many times a decode step and the starvation phenomena stand far above timing noise.
PREFILL_HEAVY = StepProfile("prefill-heavy", fixed_s=0.004, per_token_s=40e-6,
                            decode_ctx_s=0.0, prefill_ctx_s=0.0)  # fmt: skip


def sim_config(
    *,
    profile: str | StepProfile = "tiny",
    max_model_len: int = 8192,
    speed: float = 1.0,
    faults: FaultConfig | None = None,
    **engine: Any,
) -> SimServerConfig:
    prof = sim_profile(profile) if isinstance(profile, str) else profile
    return SimServerConfig(
        engine=dataclasses.replace(EngineConfig(), profile=prof, **engine),
        max_model_len=max_model_len,
        speed=speed,
        faults=faults or FaultConfig(),
    )


def stream_request(
    rid: str,
    prompt_tokens: int,
    max_tokens: int,
    *,
    salt: str | None = None,
    api: str = "completions",
) -> StreamRequest:
    """A request whose prompt is exactly `prompt_tokens` tokens; a salt keeps prompts apart in
    the prefix cache (every prompt here is the same word repeated)."""
    return StreamRequest(
        id=rid,
        model=MODEL,
        prompt=WORD * prompt_tokens,
        max_tokens=max_tokens,
        api=api,
        ignore_eos=True,
        cache_salt=salt if salt is not None else rid,
    )


async def scrape(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    """One /metrics scrape: sample name -> value, summed over label sets (buckets left out)."""
    async with session.get(url + "/metrics") as resp:
        text = await resp.text()
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if not s.name.endswith("_bucket"):
                values[s.name] = values.get(s.name, 0.0) + s.value
    return values


async def wait_until(cond: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Polls `cond` every 2 ms until it holds; fails the test after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        await asyncio.sleep(0.002)


def truth_by_client_id(server: SimServer) -> dict[str, dict[str, Any]]:
    return {row["client_request_id"]: row for row in ground_truth_rows(server.state)}


def step_gaps_s(row: dict[str, Any], after_s: float, until_s: float) -> list[float]:
    """Engine-time gaps between a request's consecutive steps whose end lies in (after, until]."""
    ends = [end for _, end, _ in row["tokens_per_step"]]
    return [b - a for a, b in itertools.pairwise(ends) if after_s < b <= until_s]


# whale_c4 shrunk so a test takes seconds: same shape (one whale, three minnows, together).
SMALL = ["groups.whale.prompt.tokens=6000", "groups.minnows.prompt.tokens=600",
         "groups.whale.max_tokens=32", "groups.minnows.max_tokens=32"]  # fmt: skip


def small_sim_config() -> SimServerConfig:
    engine = EngineConfig(
        max_num_seqs=4, max_num_batched_tokens=512, block_size=16, num_gpu_blocks=4096,
        enable_prefix_caching=True, profile=sim_profile("default"),
    )  # fmt: skip
    return SimServerConfig(engine=engine, max_model_len=16384)


async def run_against(sim, scenario_name: str, out: Path, overrides=(), seed=None) -> Path:
    scenario = load_scenario(scenario_name, [*SMALL, *overrides])
    opts = RunOptions(base_url=sim.url, out_root=out, progress=False, run_seed=seed)
    return await run_plan(plan(scenario, run_seed=seed), opts, warn=lambda m: None)
