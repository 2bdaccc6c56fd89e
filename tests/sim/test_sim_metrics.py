"""/metrics of the sim: vLLM v1's names, types and labels; valid exposition; counters add up."""

from __future__ import annotations

import asyncio
import math

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from loadgen.client.openai import OpenAIClient
from loadgen.sim.metrics import ITERATION_TOKENS_BUCKETS, IncrementalHistogram
from loadgen.sim.server import start_sim_server

from support.sim import scrape, sim_config, stream_request, truth_by_client_id

# Family name (as the parser reports it) -> type, for every family the sim exports.
EXPECTED_TYPES = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:num_preemptions": "counter",
    "vllm:prompt_tokens": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:prefix_cache_queries": "counter",
    "vllm:prefix_cache_hits": "counter",
    "vllm:spec_decode_num_drafts": "counter",
    "vllm:spec_decode_num_draft_tokens": "counter",
    "vllm:spec_decode_num_accepted_tokens": "counter",
    "vllm:request_success": "counter",
    "vllm:admission_rejections": "counter",
    "vllm:iteration_tokens_total": "histogram",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:cache_config_info": "gauge",
}
SPEC_FAMILIES = {name for name in EXPECTED_TYPES if "spec_decode" in name}


async def metrics_text(url: str) -> tuple[str, str]:
    async with aiohttp.ClientSession() as s, s.get(url + "/metrics") as r:
        return r.headers["Content-Type"], await r.text()


async def run_streams(url: str, n: int, max_tokens: int) -> list:
    async with OpenAIClient(url, concurrency=n) as client:
        reqs = [stream_request(f"r{i}", 40 + i, max_tokens) for i in range(n)]
        return await asyncio.gather(*(client.stream(r) for r in reqs))


async def test_every_family_parses_with_vllm_names_types_and_labels() -> None:
    cfg = sim_config(num_speculative_tokens=2, acceptance_rate=0.5)
    async with start_sim_server(cfg) as server:
        await run_streams(server.url, 2, 9)
        content_type, text = await metrics_text(server.url)
    assert content_type.startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert {name: f.type for name, f in families.items()} == EXPECTED_TYPES
    for name, family in families.items():
        for sample in family.samples:
            if name == "vllm:cache_config_info":
                assert "model_name" not in sample.labels  # as vLLM: config labels + engine
            else:
                assert sample.labels["model_name"] == "loadgen-sim"
            assert sample.labels["engine"] == "0"
    counter_samples = {s.name for s in families["vllm:prompt_tokens"].samples}
    assert counter_samples == {"vllm:prompt_tokens_total"}  # no *_created series
    buckets = [s.labels["le"] for s in families["vllm:iteration_tokens_total"].samples
               if s.name.endswith("_bucket")]  # fmt: skip
    assert buckets == [str(float(b)) for b in ITERATION_TOKENS_BUCKETS] + ["+Inf"]
    reasons = {s.labels["finished_reason"] for s in families["vllm:request_success"].samples}
    assert reasons == {"stop", "length", "abort"}


async def test_spec_decode_families_exist_only_with_speculation() -> None:
    async with start_sim_server(sim_config()) as server:
        _, text = await metrics_text(server.url)
    names = {f.name for f in text_string_to_metric_families(text)}
    assert names == set(EXPECTED_TYPES) - SPEC_FAMILIES


async def test_counters_add_up_to_what_the_clients_and_engine_saw() -> None:
    async with start_sim_server(sim_config()) as server, aiohttp.ClientSession() as s:
        recs = await run_streams(server.url, 3, 7)
        m = await scrape(s, server.url)
        truth = truth_by_client_id(server)
        steps = server.engine.iteration_tokens
    assert m["vllm:prompt_tokens_total"] == sum(r.prompt_tokens for r in recs) == 3 * 40 + 3
    assert m["vllm:generation_tokens_total"] == sum(r.completion_tokens for r in recs) == 21
    assert m["vllm:request_success_total"] == 3
    # Short prompts: every step emits a token, so vLLM's count is every engine step.
    assert m["vllm:iteration_tokens_total_count"] == len(steps)
    # As vLLM v1 counts: each prompt whole at its first token, and every output token.
    assert m["vllm:iteration_tokens_total_sum"] == 123 + 21
    # The engine computed every prompt token once and every output token but each last one.
    assert sum(steps) == 123 + 3 * (7 - 1)
    assert m["vllm:time_to_first_token_seconds_count"] == 3
    ttft = sum(row["first_token_s"] - row["arrival_s"] for row in truth.values())
    assert math.isclose(m["vllm:time_to_first_token_seconds_sum"], ttft)
    assert m["vllm:num_requests_running"] == m["vllm:num_requests_waiting"] == 0
    assert m["vllm:kv_cache_usage_perc"] == 0.0


async def test_cache_config_info_carries_the_pool_geometry() -> None:
    cfg = sim_config(block_size=32, num_gpu_blocks=500, enable_prefix_caching=False,
                     max_model_len=4096)  # fmt: skip
    async with start_sim_server(cfg) as server:
        _, text = await metrics_text(server.url)
    info = next(f for f in text_string_to_metric_families(text) if f.name.endswith("config_info"))
    [sample] = info.samples
    assert sample.value == 1.0
    assert sample.labels == {
        "block_size": "32",
        "cache_dtype": "auto",
        "enable_prefix_caching": "False",
        "num_gpu_blocks": "500",
        "num_cpu_blocks": "None",
        "kv_cache_size_tokens": "16000",
        "engine": "0",
    }


def test_incremental_histogram_folds_only_new_samples() -> None:
    h = IncrementalHistogram([1, 8, 16])
    samples = [1, 2, 8]
    h.update(samples)
    samples += [9, 100]
    h.update(samples)
    h.update(samples)  # nothing new: nothing counted twice
    assert h.cumulative() == [("1.0", 1), ("8.0", 3), ("16.0", 4), ("+Inf", 5)]
    assert h.sum == 120
