"""The seeds' serving phenomena, reproduced by the sim and seen as loadgen's records.

Each test sends requests straight into a sim on the virtual clock (issue #9) at chosen instants
and checks the records and /metrics samples against the engine's ground truth. Client and
engine share that clock, so timing claims are exact and hold however busy the machine is; the
HTTP path itself is tested on the wall clock elsewhere (test_sim_server.py,
test_run_integration.py).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import pytest

from loadgen.analysis.rates import ttft_s
from loadgen.records import StreamRecord
from loadgen.sim.faults import FaultConfig

from support.sim import PREFILL_HEAVY, sim_config, step_gaps_s, stream_request
from support.virtual import Driven, drive

WHALE = 6000
MINNOW = 30
# Requests sent "while the whale is in prefill": 1 ms after it, inside its first step.
DURING_FIRST_STEP_S = 0.001


def first_prefill_s(row: dict[str, Any]) -> float:
    return row["prefill_chunks"][0][1]


async def whale_first(budget: int, minnow_tokens: int = 8, threshold: int = 0) -> Driven:
    """The whale reaches the engine first; three minnows arrive while it is in prefill."""
    cfg = sim_config(
        profile=PREFILL_HEAVY, max_num_batched_tokens=budget,
        long_prefill_token_threshold=threshold,
    )  # fmt: skip
    minnows = [stream_request(f"m{i}", MINNOW, minnow_tokens) for i in range(3)]
    sends = [(0.0, stream_request("whale", WHALE, 4))]
    return await drive(cfg, sends + [(DURING_FIRST_STEP_S, m) for m in minnows])


async def test_a_whale_first_in_line_holds_minnows_until_its_prefill_ends() -> None:
    for budget in (2048, 512):
        run = await whale_first(budget)
        truth = run.truth()
        whale = truth["whale"]
        assert len(whale["prefill_chunks"]) == math.ceil(WHALE / budget)
        assert run.records["whale"].status == "ok"
        for i in range(3):
            rec, row = run.records[f"m{i}"], truth[f"m{i}"]
            assert rec.status == "ok" and rec.completion_tokens == 8
            assert row["arrival_s"] < whale["first_token_s"]  # it came during the prefill...
            # ...and was first scheduled in the whale's last prefill step (its leftover budget).
            assert row["prefill_chunks"][0][0] == whale["prefill_chunks"][-1][0]
            assert row["first_token_s"] == whale["first_token_s"]
            assert rec.t_first_ns == whale["first_token_ns"]


async def test_a_prefill_threshold_lets_queued_minnows_in_during_the_whale_prefill() -> None:
    # vLLM's --long-prefill-token-threshold caps the whale's chunk, leaving budget for minnows.
    run = await whale_first(512, minnow_tokens=60, threshold=256)
    truth = run.truth()
    whale = truth["whale"]
    assert run.records["whale"].status == "ok"
    assert {n for *_, n in whale["prefill_chunks"]} == {256, WHALE % 256}
    for i in range(3):
        rec = run.records[f"m{i}"]
        assert rec.status == "ok"
        assert truth[f"m{i}"]["first_token_s"] < whale["first_token_s"]
        assert rec.t_first_ns < whale["first_token_ns"]
    m0 = truth["m0"]
    assert m0["finished_s"] > whale["first_token_s"]
    during = statistics.mean(step_gaps_s(m0, m0["first_token_s"], whale["first_token_s"]))
    after = statistics.mean(step_gaps_s(m0, whale["first_token_s"], m0["finished_s"]))
    assert during > 2.5 * after


async def minnows_then_whale(budget: int) -> Driven:
    """Three minnows are decoding when the whale arrives (the seed's minnows ahead of it): their
    30-token prefills share the first ~8 ms step, and the whale comes at 20 ms."""
    cfg = sim_config(profile=PREFILL_HEAVY, max_num_batched_tokens=budget)
    sends = [(0.0, stream_request(f"m{i}", MINNOW, 100)) for i in range(3)]
    run = await drive(cfg, [*sends, (0.02, stream_request("whale", WHALE, 4))])
    assert all(r.status == "ok" for r in run.records.values())
    return run


def client_rate(rec: StreamRecord, after_ns: int, until_ns: int) -> float:
    """Chunks per second over the client's chunk arrivals in (after, until] (run clock)."""
    ns = [t for t in rec.chunk_ns if after_ns < t <= until_ns]
    return (len(ns) - 1) / ((ns[-1] - ns[0]) / 1e9)


async def test_minnows_ahead_of_the_whale_decode_rationed_during_its_prefill() -> None:
    during_rate = {}
    for budget in (512, 2048):
        run = await minnows_then_whale(budget)
        truth = run.truth()
        whale = truth["whale"]
        start, end = first_prefill_s(whale), whale["first_token_s"]
        m0, rec = truth["m0"], run.records["m0"]
        assert m0["first_token_s"] < start < end < m0["finished_s"]
        during = statistics.mean(step_gaps_s(m0, start, end))
        after = statistics.mean(step_gaps_s(m0, end, m0["finished_s"]))
        assert during > 4 * after  # each minnow token waits for a whale chunk
        during_rate[budget] = 1 / during
        # The records say the same: the minnow's chunk rate collapses while the whale prefills.
        start_ns, end_ns = whale["prefill_chunks_ns"][0][1], whale["first_token_ns"]
        rationed = client_rate(rec, start_ns, end_ns)
        free = client_rate(rec, end_ns, rec.t_last_ns)
        assert rationed < 0.5 * free
    # The politeness knob: a smaller budget means shorter whale chunks, so faster minnows.
    assert during_rate[512] > 2 * during_rate[2048]


async def test_an_admission_cap_queues_with_the_pool_mostly_free() -> None:
    run = await drive(
        sim_config(max_num_seqs=2),
        [(0.0, stream_request(f"r{i}", 50, 150)) for i in range(4)],
        poll_s=0.001,
    )
    seen = [m.values for m in run.metrics if m.values["num_requests_waiting"] == 2]
    assert seen, "never saw 2 requests waiting"
    assert seen[0]["num_requests_running"] == 2
    # The other value seen is 0: polls inside the step that finished the first two (a step's
    # bookkeeping happens when it starts, as in the wall-clock sim), before the next admits.
    assert {m["num_requests_running"] for m in seen} <= {0, 2}
    assert all(m["kv_cache_usage_perc"] < 0.5 for m in seen)
    assert [run.records[f"r{i}"].completion_tokens for i in range(4)] == [150] * 4


async def test_a_small_pool_preempts_and_every_request_still_gets_every_token() -> None:
    # 4 x (100 + 200) tokens = 76 blocks of 16 wanted, 64 in the pool.
    cfg = sim_config(num_gpu_blocks=64, max_model_len=1024)
    run = await drive(
        cfg, [(0.0, stream_request(f"r{i}", 100, 200)) for i in range(4)], poll_s=0.001
    )
    peak = max(m.values["kv_cache_usage_perc"] for m in run.metrics)
    final = run.metrics[-1].values
    truth = run.truth()
    assert peak >= 0.98
    assert final["num_preemptions_total"] > 0
    assert sum(len(row["preemptions"]) for row in truth.values()) == final["num_preemptions_total"]
    for rec in run.records.values():
        assert rec.status == "ok"
        assert rec.completion_tokens == 200  # from usage, which equals max_tokens
        assert rec.chunk_tokens == [1] * 200  # no token sent twice after a recompute
    assert final["kv_cache_usage_perc"] == 0.0


PINNED = 8000  # tokens: 499 full blocks of 16 can be reused, the last token's block not


async def same_prompt_twice(
    faults: FaultConfig,
) -> tuple[list[StreamRecord], list[float], list[float]]:
    """The same prompt twice in a row: the records, the hit counter after each, and each one's
    engine TTFT. The `default` profile prices prefill like a (10x faster) 4090."""
    cfg = sim_config(profile="default", faults=faults)
    first = await drive(cfg, [(0.0, stream_request("p", PINNED, 2, salt="pinned"))])
    hits = [first.metrics[-1].values["prefix_cache_hits_total"]]
    again = stream_request("p2", PINNED, 2, salt="pinned")
    second = await drive(cfg, [(0.0, again)], sim=first.sim, metrics=first.metrics)
    hits.append(second.metrics[-1].values["prefix_cache_hits_total"])
    engine_ttft = [row["first_token_s"] - row["arrival_s"] for row in second.sim.truth_rows()]
    return [first.records["p"], second.records["p2"]], hits, engine_ttft


async def test_the_same_prompt_twice_hits_the_prefix_cache() -> None:
    (cold, warm), hits, (cold_s, warm_s) = await same_prompt_twice(FaultConfig())
    assert warm_s < cold_s / 5
    assert ttft_s(warm) == pytest.approx(warm_s) and ttft_s(cold) == pytest.approx(cold_s)
    assert hits == [0.0, 7984.0]  # every full block but the one holding the last token
    assert (cold.cached_tokens, warm.cached_tokens) == (0, 7984)


async def test_a_cache_dead_boot_never_hits() -> None:
    (cold, warm), hits, (cold_s, warm_s) = await same_prompt_twice(FaultConfig(cache_dead=True))
    assert hits == [0.0, 0.0]
    assert (cold.cached_tokens, warm.cached_tokens) == (0, 0)
    assert warm_s == pytest.approx(cold_s, rel=0.01)


async def test_speculative_decoding_sends_one_chunk_per_engine_step() -> None:
    cfg = sim_config(num_speculative_tokens=3, acceptance_rate=1.0)
    run = await drive(cfg, [(0.0, stream_request(f"r{i}", 20, 37)) for i in range(3)])
    truth, m = run.truth(), run.metrics[-1].values
    for rec in run.records.values():
        steps = 1 + math.ceil((37 - 1) / 4)
        assert rec.chunks == len(truth[rec.id]["tokens_per_step"]) == steps == 10
        assert rec.chunk_tokens == [1] + [4] * 9  # the first token, then k + 1 per step
    assert m["generation_tokens_total"] == sum(r.completion_tokens for r in run.records.values())
    assert m["generation_tokens_total"] == 111
    assert m["spec_decode_num_drafts_total"] == 3 * 9
    assert m["spec_decode_num_draft_tokens_total"] == 3 * 9 * 3
    assert m["spec_decode_num_accepted_tokens_total"] == 3 * 9 * 3
