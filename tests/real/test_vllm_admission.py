"""loadgen against vLLM with its admission cap at 2 and a 512-token step budget: the launcher
reads both limits back, four streams show up in /metrics as two running, two waiting, and
through run_plan the two that waited get `admission_cap` against the cap from the boot log."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadgen.analysis.rates import ttft_s
from loadgen.request import StreamRequest
from loadgen.server.launcher import Server

from support.real import (
    assert_two_waited_on_the_cap,
    client,
    note,
    polling,
    run_uniform,
    running,
    running_waiting,
    verdict_line,
)

pytestmark = pytest.mark.real

FLAGS = ["--max-num-seqs", "2", "--max-num-batched-tokens", "512"]


@pytest.fixture(scope="module")
def vllm_capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running("vllm", FLAGS, tmp_path_factory.mktemp("vllm-capped")) as server:
        yield server


def test_limits_are_read_back(vllm_capped: Server) -> None:
    facts = vllm_capped.facts
    assert (facts.max_num_seqs, facts.max_num_batched_tokens) == (2, 512)
    assert (facts.block_size, facts.kv_cache_tokens, facts.max_model_len) == (32, 524_288, 8192)
    assert facts.num_gpu_blocks == 524_288 // 32
    assert facts.sources["max_num_seqs"] == "boot_log"
    assert facts.sources["max_num_batched_tokens"] == "boot_log"
    assert facts.sources["num_gpu_blocks"] == "metrics"


async def test_four_streams_two_run_two_wait(vllm_capped: Server) -> None:
    async with client(vllm_capped) as c, polling(c) as samples:
        reqs = [
            StreamRequest(
                id=f"capped-{i}",
                model=vllm_capped.model,
                prompt=f"class Stream{i}:",
                max_tokens=300,
                ignore_eos=True,
            )
            for i in range(4)
        ]
        recs = await asyncio.gather(*(c.stream(r) for r in reqs))
    assert all(rec.status == "ok" and rec.completion_tokens == 300 for rec in recs)
    seen = running_waiting(samples)
    assert (2, 2) in seen, f"polls saw (running, waiting) {sorted(seen)}"
    assert max(running for running, _ in seen) == 2
    ttfts = sorted(t for t in map(ttft_s, recs) if t is not None)
    note("vllm max-num-seqs 2, TTFT of 4 streams", ", ".join(f"{t:.3f} s" for t in ttfts))


async def test_streams_over_the_cap_get_admission_cap(vllm_capped: Server, tmp_path: Path) -> None:
    # Through run_plan, with the launch's facts: the cap comes from vLLM's boot log.
    summary = await run_uniform(vllm_capped, tmp_path)
    note("vllm max-num-seqs 2, run_plan verdicts", verdict_line(summary))
    assert_two_waited_on_the_cap(summary, "boot_log")
