"""Each `--fault` of the sim: parsed from its option, then seen from a client over loopback."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from loadgen.client.openai import OpenAIClient
from loadgen.sim.faults import FaultConfig, FaultInjector, RequestFaults, parse_fault_options
from loadgen.sim.server import start_sim_server

from support.sim import (
    MODEL,
    WORD,
    scrape,
    sim_config,
    step_gaps_s,
    stream_request,
    truth_by_client_id,
    wait_until,
)
from support.virtual import drive


def test_fault_options_parse_into_one_config() -> None:
    got = parse_fault_options(
        ["http500=0.1", "http429=0.2", "drop=0.05", "stall=1", "stall_s=0.5", "cache_dead",
         "drift=5", "max_waiting=3"]
    )  # fmt: skip
    assert got == FaultConfig(http500=0.1, http429=0.2, drop=0.05, stall=1.0, stall_s=0.5,
                              cache_dead=True, drift=5.0, max_waiting=3)  # fmt: skip
    assert parse_fault_options([]) == FaultConfig()


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("boom=1", "unknown fault 'boom=1'"),
        ("http500", "needs a value"),
        ("http500=2", "probability must lie in 0..1"),
        ("drop=lots", "'lots' is not a number"),
        ("max_waiting=1.5", "'1.5' is not a number"),
        ("stall_s=-1", "must not be negative"),
        ("cache_dead=no", "cache_dead takes no value"),
    ],
)
def test_bad_fault_options_say_what_is_wrong(option: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_fault_options([option])


def draws(injector: FaultInjector, n: int) -> list[RequestFaults]:
    return [injector.draw() for _ in range(n)]


def test_the_same_seed_fails_the_same_requests() -> None:
    cfg = FaultConfig(http500=0.3, http429=0.3, drop=0.3, stall=0.3)
    runs = [draws(FaultInjector(cfg, seed=7), 50) for _ in range(2)]
    other_seed = draws(FaultInjector(cfg, seed=8), 50)
    assert runs[0] == runs[1]
    assert runs[0] != other_seed
    kinds = {(f.http_status, f.mid_stream) for f in runs[0]}
    assert kinds == {(500, None), (429, None), (None, "drop"), (None, "stall"), (None, None)}


def test_a_named_request_meets_its_own_faults_whatever_came_before() -> None:
    # Drawn in arrival order, the launched sim's boot check took one draw over HTTP that the
    # virtual clock never made: one seed failed streams 9, 10, 12 on one clock and 10, 11, 13
    # on the other, and compare read the difference as the sim's error.
    cfg = FaultConfig(http500=0.3, drop=0.3)
    ids = [f"default/r0/g/{i}" for i in range(40)]
    fresh = [FaultInjector(cfg, seed=7).draw(i) for i in ids]
    after_others = FaultInjector(cfg, seed=7)
    after_others.draw(), after_others.draw("boot-check")
    assert [after_others.draw(i) for i in reversed(ids)] == fresh[::-1]
    assert {f.http_status for f in fresh} == {500, None}
    assert [FaultInjector(cfg, seed=8).draw(i) for i in ids] != fresh


def test_no_http_fault_draws_nothing() -> None:
    assert FaultInjector(FaultConfig(cache_dead=True)).draw() == RequestFaults()


async def statuses(url: str, n: int) -> list[int]:
    body = {"model": MODEL, "prompt": WORD * 4, "max_tokens": 2}
    out = []
    async with aiohttp.ClientSession() as s:
        for _ in range(n):
            async with s.post(url + "/v1/completions", json=body) as r:
                await r.read()
                out.append(r.status)
    return out


@pytest.mark.parametrize("status", [500, 429])
async def test_http_error_faults_answer_with_the_status(status: int) -> None:
    faults = FaultConfig(http500=1.0) if status == 500 else FaultConfig(http429=1.0)
    async with start_sim_server(sim_config(faults=faults)) as server:
        async with OpenAIClient(server.url) as client:
            rec = await client.stream(stream_request("r", 8, 4))
        assert server.engine.ground_truth() == []  # refused before the engine
    assert rec.status == "error"
    assert rec.http_status == status
    assert rec.error is not None and rec.error.cls == f"http_{status}"


async def test_http_faults_follow_the_seed_across_boots() -> None:
    cfg = sim_config(faults=FaultConfig(http500=0.5), seed=3)
    seen = []
    for _ in range(2):
        async with start_sim_server(cfg) as server:
            seen.append(await statuses(server.url, 12))
    assert seen[0] == seen[1]
    assert set(seen[0]) == {200, 500}


async def test_drop_cuts_the_stream_and_frees_the_request() -> None:
    async with start_sim_server(sim_config(faults=FaultConfig(drop=1.0))) as server:
        async with OpenAIClient(server.url) as client:
            rec = await client.stream(stream_request("r", 32, 50))
        await wait_until(lambda: server.engine.kv_cache_usage_perc == 0.0)
        row = truth_by_client_id(server)["r"]
    assert rec.status == "error"
    assert rec.error is not None and rec.error.cls == "connection_closed"
    assert rec.chunks == 1  # cut after the first content event
    assert row["finish_reason"] == "abort"


async def test_stall_holds_the_stream_after_its_first_chunk() -> None:
    faults = FaultConfig(stall=1.0, stall_s=0.3)
    async with start_sim_server(sim_config(faults=faults)) as server:
        async with OpenAIClient(server.url) as client:
            rec = await client.stream(stream_request("r", 16, 20))
        row = truth_by_client_id(server)["r"]
    assert rec.status == "ok"
    assert rec.completion_tokens == 20
    # The engine went on (all 20 steps took ~40 ms); only delivery stalled.
    assert row["finished_s"] - row["first_token_s"] < 0.3
    assert rec.chunk_ns[1] - rec.chunk_ns[0] >= 300_000_000


async def test_cache_dead_queries_but_never_hits() -> None:
    cfg = sim_config(faults=FaultConfig(cache_dead=True))
    async with start_sim_server(cfg) as server, OpenAIClient(server.url) as client:
        for _ in range(2):
            rec = await client.stream(stream_request("same", 200, 2, salt="s"))
            assert rec.cached_tokens == 0
        async with aiohttp.ClientSession() as s:
            m = await scrape(s, server.url)
    assert m["vllm:prefix_cache_queries_total"] == 400
    assert m["vllm:prefix_cache_hits_total"] == 0


async def test_drift_stretches_step_time_with_engine_hours() -> None:
    # drift=50 (% per hour), judged on the virtual clock: the second request comes two engine
    # hours after the first, with no wall time spent waiting for them.
    cfg = sim_config(faults=FaultConfig(drift=50.0))
    run = await drive(
        cfg, [(0.0, stream_request("early", 16, 6, salt="x")),
              (2 * 3600.0, stream_request("late", 16, 6, salt="x"))],
        poll_s=600.0,
    )  # fmt: skip
    assert run.sim.engine.config.drift_per_hour == 0.5
    truth = run.truth()
    early, late = truth["early"], truth["late"]
    ends_e = [end for _, end, _ in early["tokens_per_step"]]
    ends_l = [end for _, end, _ in late["tokens_per_step"]]
    gaps_e = step_gaps_s(early, 0.0, float("inf"))
    gaps_l = step_gaps_s(late, 0.0, float("inf"))
    # Each decode step of `late` is the same work as `early`'s, stretched by its start time.
    for start_e, start_l, ge, gl in zip(ends_e, ends_l, gaps_e, gaps_l, strict=False):
        expected = (1 + 0.5 * start_l / 3600) / (1 + 0.5 * start_e / 3600)
        assert gl / ge == pytest.approx(expected, rel=1e-9)
    assert late["arrival_s"] == 2 * 3600
    assert gaps_l[0] / gaps_e[0] == pytest.approx(2.0, rel=1e-4)  # twice as slow, two hours on


async def test_max_waiting_rejects_admission_with_503() -> None:
    cfg = sim_config(faults=FaultConfig(max_waiting=1), max_num_seqs=1)
    async with start_sim_server(cfg) as server, OpenAIClient(server.url) as client:
        engine = server.engine
        first = asyncio.create_task(client.stream(stream_request("a", 16, 400)))
        await wait_until(lambda: engine.num_requests_running == 1)
        second = asyncio.create_task(client.stream(stream_request("b", 16, 4)))
        await wait_until(lambda: engine.num_requests_waiting == 1)
        t0 = time.perf_counter()
        rejected = await client.stream(stream_request("c", 16, 4))
        assert time.perf_counter() - t0 < 1.0  # refused at once, not queued
        async with aiohttp.ClientSession() as s:
            m = await scrape(s, server.url)
        done = await asyncio.gather(first, second)
    assert rejected.http_status == 503
    assert rejected.error is not None and rejected.error.cls == "http_503"
    assert m["vllm:admission_rejections_total"] == 1
    assert [r.status for r in done] == ["ok", "ok"]
