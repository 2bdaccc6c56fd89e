"""The seeds' serving phenomena, reproduced by the sim and seen by loadgen's own client.

Each test drives the sim over loopback with OpenAIClient and checks the client's records against
the engine's ground truth (GET /sim/requests). Timing claims are judged on engine time (exact,
whatever the CPU load); client-side timings are checked only for order and for rates over many
chunks, where bursts from a busy event loop cancel out.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import time
from typing import Any

import aiohttp
import pytest
from sim_support import (
    PREFILL_HEAVY,
    scrape,
    sim_config,
    step_gaps_s,
    stream_request,
    truth_by_client_id,
    wait_until,
)

from loadgen.analysis.rates import ttft_s
from loadgen.client.openai import OpenAIClient
from loadgen.records import StreamRecord
from loadgen.sim.faults import FaultConfig
from loadgen.sim.server import SimServer, ground_truth_rows, start_sim_server

WHALE = 6000
MINNOW = 30


def first_prefill_s(row: dict[str, Any]) -> float:
    return row["prefill_chunks"][0][1]


async def whale_first(
    server: SimServer, client: OpenAIClient, minnow_tokens: int = 8
) -> list[StreamRecord]:
    """The whale reaches the engine first; three minnows arrive while it is in prefill."""
    whale = asyncio.create_task(client.stream(stream_request("whale", WHALE, 4)))
    await wait_until(lambda: server.engine.num_requests_running == 1)
    minnows = [stream_request(f"m{i}", MINNOW, minnow_tokens) for i in range(3)]
    return await asyncio.gather(whale, *(client.stream(m) for m in minnows))


async def test_a_whale_first_in_line_holds_minnows_until_its_prefill_ends() -> None:
    for budget in (2048, 512):
        cfg = sim_config(profile=PREFILL_HEAVY, max_num_batched_tokens=budget)
        async with start_sim_server(cfg) as server:
            run_start = time.perf_counter_ns()
            async with OpenAIClient(server.url, concurrency=4, run_start_ns=run_start) as client:
                whale_rec, *minnow_recs = await whale_first(server, client)
            truth = truth_by_client_id(server)
        whale = truth["whale"]
        assert len(whale["prefill_chunks"]) == math.ceil(WHALE / budget)
        assert whale_rec.status == "ok"
        for rec in minnow_recs:
            row = truth[rec.id]
            assert rec.status == "ok" and rec.completion_tokens == 8
            assert row["arrival_s"] < whale["first_token_s"]  # it came during the prefill...
            # ...and was first scheduled in the whale's last prefill step (its leftover budget).
            assert row["prefill_chunks"][0][0] == whale["prefill_chunks"][-1][0]
            assert row["first_token_s"] == whale["first_token_s"]
            assert rec.t_first_ns + run_start >= whale["first_token_ns"]


async def test_a_prefill_threshold_lets_queued_minnows_in_during_the_whale_prefill() -> None:
    # vLLM's --long-prefill-token-threshold caps the whale's chunk, leaving budget for minnows.
    cfg = sim_config(profile=PREFILL_HEAVY, max_num_batched_tokens=512,
                     long_prefill_token_threshold=256)  # fmt: skip
    async with start_sim_server(cfg) as server:
        run_start = time.perf_counter_ns()
        async with OpenAIClient(server.url, concurrency=4, run_start_ns=run_start) as client:
            whale_rec, *minnow_recs = await whale_first(server, client, minnow_tokens=60)
        truth = truth_by_client_id(server)
    whale = truth["whale"]
    assert whale_rec.status == "ok"
    assert {n for *_, n in whale["prefill_chunks"]} == {256, WHALE % 256}
    for rec in minnow_recs:
        assert rec.status == "ok"
        assert truth[rec.id]["first_token_s"] < whale["first_token_s"]
        assert rec.t_first_ns + run_start < whale["first_token_ns"]
    m0 = truth["m0"]
    assert m0["finished_s"] > whale["first_token_s"]
    during = statistics.mean(step_gaps_s(m0, m0["first_token_s"], whale["first_token_s"]))
    after = statistics.mean(step_gaps_s(m0, whale["first_token_s"], m0["finished_s"]))
    assert during > 2.5 * after


async def minnows_then_whale(budget: int) -> tuple[dict[str, dict], list[StreamRecord]]:
    """Three minnows are decoding when the whale arrives (the seed's minnows ahead of it)."""
    cfg = sim_config(profile=PREFILL_HEAVY, max_num_batched_tokens=budget)
    async with start_sim_server(cfg) as server:
        run_start = time.perf_counter_ns()
        async with OpenAIClient(server.url, concurrency=4, run_start_ns=run_start) as client:
            minnows = [asyncio.create_task(client.stream(stream_request(f"m{i}", MINNOW, 100)))
                       for i in range(3)]  # fmt: skip
            await wait_until(lambda: len(server.engine.ttft_samples) == 3)
            whale = await client.stream(stream_request("whale", WHALE, 4))
            recs = [whale, *await asyncio.gather(*minnows)]
        truth = truth_by_client_id(server)
    assert all(r.status == "ok" for r in recs)
    for row in truth.values():
        row["run_start_ns"] = run_start
    return truth, recs


def client_rate(rec: StreamRecord, after_ns: int, until_ns: int) -> float:
    """Chunks per second over the client's chunk arrivals in (after, until] (run clock)."""
    ns = [t for t in rec.chunk_ns if after_ns < t <= until_ns]
    return (len(ns) - 1) / ((ns[-1] - ns[0]) / 1e9)


async def test_minnows_ahead_of_the_whale_decode_rationed_during_its_prefill() -> None:
    during_rate = {}
    for budget in (512, 2048):
        truth, recs = await minnows_then_whale(budget)
        whale = truth["whale"]
        start, end = first_prefill_s(whale), whale["first_token_s"]
        m0, rec = truth["m0"], next(r for r in recs if r.id == "m0")
        assert m0["first_token_s"] < start < end < m0["finished_s"]
        during = statistics.mean(step_gaps_s(m0, start, end))
        after = statistics.mean(step_gaps_s(m0, end, m0["finished_s"]))
        assert during > 4 * after  # each minnow token waits for a whale chunk
        during_rate[budget] = 1 / during
        # The client sees the same: its chunk rate collapses while the whale prefills.
        run0 = m0["run_start_ns"]
        start_ns, end_ns = whale["prefill_chunks_ns"][0][1] - run0, whale["first_token_ns"] - run0
        rationed = client_rate(rec, start_ns, end_ns)
        free = client_rate(rec, end_ns, rec.t_last_ns)
        assert rationed < 0.5 * free
    # The politeness knob: a smaller budget means shorter whale chunks, so faster minnows.
    assert during_rate[512] > 2 * during_rate[2048]


async def test_an_admission_cap_queues_with_the_pool_mostly_free() -> None:
    cfg = sim_config(max_num_seqs=2)
    async with (
        start_sim_server(cfg) as server,
        aiohttp.ClientSession() as session,
        OpenAIClient(server.url, concurrency=4) as client,
    ):
        reqs = [stream_request(f"r{i}", 50, 150) for i in range(4)]
        streams = asyncio.gather(*(client.stream(r) for r in reqs))
        seen: dict[str, float] = {}
        while not streams.done() and not seen:
            m = await scrape(session, server.url)
            if m["vllm:num_requests_waiting"] == 2:
                seen = m
        recs = await streams
    assert seen, "never saw 2 requests waiting"
    assert seen["vllm:num_requests_running"] == 2
    assert seen["vllm:kv_cache_usage_perc"] < 0.5
    assert [r.completion_tokens for r in recs] == [150] * 4


async def test_a_small_pool_preempts_and_every_request_still_gets_every_token() -> None:
    # 4 x (100 + 200) tokens = 76 blocks of 16 wanted, 64 in the pool.
    cfg = sim_config(num_gpu_blocks=64, max_model_len=1024)
    async with start_sim_server(cfg) as server, aiohttp.ClientSession() as session:
        async with OpenAIClient(server.url, concurrency=4) as client:
            reqs = [stream_request(f"r{i}", 100, 200) for i in range(4)]
            streams = asyncio.gather(*(client.stream(r) for r in reqs))
            peak = 0.0
            while not streams.done():
                m = await scrape(session, server.url)
                peak = max(peak, m["vllm:kv_cache_usage_perc"])
            recs = await streams
        final = await scrape(session, server.url)
        truth = truth_by_client_id(server)
    assert peak >= 0.98
    assert final["vllm:num_preemptions_total"] > 0
    assert (
        sum(len(row["preemptions"]) for row in truth.values())
        == final["vllm:num_preemptions_total"]
    )
    for rec in recs:
        assert rec.status == "ok"
        assert rec.completion_tokens == 200  # from usage, which equals max_tokens
        assert rec.chunk_tokens == [1] * 200  # no token sent twice after a recompute
    assert final["vllm:kv_cache_usage_perc"] == 0.0


PINNED = 8000  # tokens: 499 full blocks of 16 can be reused, the last token's block not


async def same_prompt_twice(
    faults: FaultConfig,
) -> tuple[list[StreamRecord], list[float], list[float]]:
    """The same prompt twice in a row: the records, the hit counter after each, and each one's
    engine TTFT. The `default` profile prices prefill like a (10x faster) 4090."""
    cfg = sim_config(profile="default", faults=faults)
    async with start_sim_server(cfg) as server, aiohttp.ClientSession() as session:
        recs, hits = [], []
        async with OpenAIClient(server.url) as client:
            for _ in range(2):
                recs.append(await client.stream(stream_request("p", PINNED, 2, salt="pinned")))
                hits.append((await scrape(session, server.url))["vllm:prefix_cache_hits_total"])
        engine_ttft = [
            row["first_token_s"] - row["arrival_s"] for row in ground_truth_rows(server.state)
        ]
    return recs, hits, engine_ttft


async def test_the_same_prompt_twice_hits_the_prefix_cache() -> None:
    (cold, warm), hits, (cold_s, warm_s) = await same_prompt_twice(FaultConfig())
    assert warm_s < cold_s / 5
    assert ttft_s(warm) < ttft_s(cold) / 5
    assert hits == [0.0, 7984.0]  # every full block but the one holding the last token
    assert (cold.cached_tokens, warm.cached_tokens) == (0, 7984)


async def test_a_cache_dead_boot_never_hits() -> None:
    (cold, warm), hits, (cold_s, warm_s) = await same_prompt_twice(FaultConfig(cache_dead=True))
    assert hits == [0.0, 0.0]
    assert (cold.cached_tokens, warm.cached_tokens) == (0, 0)
    assert warm_s == pytest.approx(cold_s, rel=0.01)


async def test_speculative_decoding_sends_one_chunk_per_engine_step() -> None:
    cfg = sim_config(num_speculative_tokens=3, acceptance_rate=1.0)
    async with start_sim_server(cfg) as server, aiohttp.ClientSession() as session:
        async with OpenAIClient(server.url, concurrency=3) as client:
            reqs = [stream_request(f"r{i}", 20, 37) for i in range(3)]
            recs = await asyncio.gather(*(client.stream(r) for r in reqs))
        m = await scrape(session, server.url)
        truth = truth_by_client_id(server)
    for rec in recs:
        steps = 1 + math.ceil((37 - 1) / 4)
        assert rec.chunks == len(truth[rec.id]["tokens_per_step"]) == steps == 10
        assert rec.chunk_tokens == [1] + [4] * 9  # the first token, then k + 1 per step
    assert m["vllm:generation_tokens_total"] == sum(r.completion_tokens for r in recs) == 111
    assert m["vllm:spec_decode_num_drafts_total"] == 3 * 9
    assert m["vllm:spec_decode_num_draft_tokens_total"] == 3 * 9 * 3
    assert m["vllm:spec_decode_num_accepted_tokens_total"] == 3 * 9 * 3
