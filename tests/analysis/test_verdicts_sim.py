"""Issue #5's must-show, against the sim's ground truth (what the engine really did): token
counts and timings agree with the engine's, the verdicts name the cause the sim was configured
to produce, and spec-decode rates are counted in tokens, not chunks.

Each test runs a small scenario (tests/data/scenarios/) on the virtual clock (issue #9): the
plan goes straight into a sim engine booted for the case, on the `default` profile (the seed's
4090 card / 10), with no HTTP and no sleeping. Timings are the engine's to the nanosecond, so
the expectations are exact and hold however busy the machine is. The HTTP path (client, SSE,
poller over loopback) keeps its own wall-clock tests (test_run_integration.py,
test_sim_phenomena.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loadgen.analysis import rates
from loadgen.report.cmd import write_report
from loadgen.report.tables import rate, triple

from support.paths import DATA
from support.virtual import VirtualRun, run_virtual, sim_overrides

NS = rates.NS
SCENARIOS = DATA / "scenarios"
WHALE = SCENARIOS / "verdict_whale.yaml"
UNIFORM = SCENARIOS / "verdict_uniform.yaml"
POOL = SCENARIOS / "verdict_pool.yaml"
# Client and engine share one clock here: their figures agree to float rounding.
EXACT = 1e-9


def sim_config(max_model_len: int = 8192, **engine: Any) -> list[str]:
    """The sim the case boots (the `default` profile, 4096 blocks of 16 unless said), as
    `--set sim.*` overrides."""
    settings = {"profile": "default", "num_gpu_blocks": 4096, "max_model_len": max_model_len}
    return sim_overrides(**(settings | engine))


async def run_on_sim(sim: list[str], scenario: Path, overrides: list[str], out: Path) -> VirtualRun:
    """Runs the scenario on the virtual clock against a fresh sim booted with `sim`."""
    return await run_virtual(scenario, [*sim, *overrides], out)


def engine_s(ns: int) -> float:
    """A ground-truth instant (run-clock ns) in seconds."""
    return ns / NS


def engine_decode_tok_s(row: dict[str, Any]) -> float:
    """The engine's decode-only rate: tokens after the first step over first -> last step."""
    steps = row["tokens_per_step_ns"]
    tokens = sum(n for _, _, n in steps[1:])
    return tokens * NS / (steps[-1][1] - steps[0][1])


def assert_full_and_exact(run: VirtualRun, max_tokens: dict[str, int]) -> None:
    """Every stream ok, with the engine's exact token counts and its full output."""
    assert set(run.records) == set(run.truth)
    for rid, rec in run.records.items():
        row = run.truth[rid]
        assert rec.status == "ok", rec.error
        assert rec.completion_tokens == row["completion_tokens"] == max_tokens[rec.group]
        assert rec.prompt_tokens == row["num_prompt_tokens"] == rec.requested_prompt_tokens


# ---- 1. token counts, TTFT and decode rate against the engine ----------------------------


async def test_tokens_ttft_and_decode_rate_match_the_engine(tmp_path: Path):
    # Two 6000-token prompts: TTFTs of ~0.35 s and ~0.7 s; 256 tokens of decode at ~1 ms a
    # step make a window of ~0.3 s. On one clock, client and engine agree exactly.
    run = await run_on_sim(
        sim_config(),
        UNIFORM,
        ["groups.streams.count=2", "groups.streams.prompt.tokens=6000",
         "groups.streams.max_tokens=256"],
        tmp_path,
    )  # fmt: skip
    assert_full_and_exact(run, {"streams": 256})
    for rid, rec in run.records.items():
        row = run.truth[rid]
        assert rec.token_source == "usage_continuous"
        assert rec.chunk_tokens == [n for _, _, n in row["tokens_per_step_ns"]]
        engine_ttft_s = engine_s(row["first_token_ns"]) - rec.t_sent_ns / NS
        assert engine_ttft_s > 0.3
        assert rates.ttft_s(rec) == pytest.approx(engine_ttft_s, rel=EXACT)
        assert rates.decode_tok_s(rec) == pytest.approx(engine_decode_tok_s(row), rel=EXACT)


# ---- 2. verdicts for the canonical cases -------------------------------------------------


async def test_minnows_behind_an_admitted_whale_prefill_get_prefill_hol(tmp_path: Path):
    # Budget 2048: the whale, admitted first, takes every token of every step until its prefill
    # ends; the minnows arrive 0.1 s into its ~0.3 s prefill and wait for all of it.
    run = await run_on_sim(
        sim_config(max_num_batched_tokens=2048), WHALE, ["groups.minnows.start=0.1"], tmp_path
    )
    assert_full_and_exact(run, {"whale": 32, "minnows": 32})
    (whale,) = (r for r in run.truth.values() if r["num_prompt_tokens"] == 6000)
    for rid in run.verdicts("minnows"):
        row = run.truth[rid]
        # The sim did hold them: arrived during the whale's prefill, first token after its.
        assert whale["admitted_ns"][0] < row["arrival_ns"] < whale["first_token_ns"]
        assert row["first_token_ns"] > whale["first_token_ns"]
    assert run.verdicts("minnows") == dict.fromkeys(run.verdicts("minnows"), "prefill_hol")
    for rid in run.verdicts("minnows"):
        assert "default/r0/whale/0" in run.stream(rid)["evidence"]["prefilling"]


# The minnows' own prefills (600 tokens each at budget 512, one after the other) form a short
# "other prefill" stretch right after the earlier minnows' first tokens; the whale's 0.35 s
# prefill, during which every minnow decodes at ~50 tok/s against ~1000 after, is another, and
# the one that must decide.
async def test_minnows_admitted_before_the_whale_get_rationed_decode(tmp_path: Path):
    run = await run_rationing_case(tmp_path, minnows=3)
    assert run.verdicts("minnows") == dict.fromkeys(run.verdicts("minnows"), "rationed_decode")
    for rid in run.verdicts("minnows"):
        assert run.stream(rid)["evidence"]["prefilling"] == ["default/r0/whale/0"]


async def test_one_minnow_admitted_before_the_whale_gets_rationed_decode(tmp_path: Path):
    run = await run_rationing_case(tmp_path, minnows=1)
    assert run.verdicts("minnows") == {"default/r0/minnows/0": "rationed_decode"}
    evidence = run.stream("default/r0/minnows/0")["evidence"]
    assert evidence["prefilling"] == ["default/r0/whale/0"]
    assert evidence["fraction"] < 0.25


async def run_rationing_case(tmp_path: Path, *, minnows: int) -> VirtualRun:
    """Budget 512, minnows admitted and decoding when the whale arrives 0.3 s later: each of
    the whale's ~12 prefill steps (512 tokens, ~27 ms) gives a minnow one token."""
    run = await run_on_sim(
        sim_config(max_num_batched_tokens=512),
        WHALE,
        [f"groups.minnows.count={minnows}", "groups.minnows.max_tokens=400",
         "groups.whale.start=0.3"],
        tmp_path,
    )  # fmt: skip
    assert_full_and_exact(run, {"whale": 32, "minnows": 400})
    (whale,) = (r for r in run.truth.values() if r["num_prompt_tokens"] == 6000)
    for rid in run.verdicts("minnows"):
        row = run.truth[rid]
        # Decoding through the whole of the whale's prefill, one token per 512-token step.
        assert row["first_token_ns"] < whale["arrival_ns"]
        assert row["finished_ns"] > whale["first_token_ns"]
        during = [
            n for _, end, n in row["tokens_per_step_ns"]
            if whale["admitted_ns"][0] < end <= whale["first_token_ns"]
        ]  # fmt: skip
        assert during and set(during) == {1}
    assert run.verdicts("whale") == {"default/r0/whale/0": "admitted"}
    return run


async def test_streams_over_max_num_seqs_get_admission_cap(tmp_path: Path):
    # Two seats, four streams, a pool of 65k tokens for 4 x 1.7k: only the cap holds them.
    run = await run_on_sim(sim_config(max_num_seqs=2), UNIFORM, [], tmp_path)
    assert_full_and_exact(run, {"streams": 200})
    # The engine seated two on arrival and each of the others only when a stream finished.
    first_finish = min(r["finished_ns"] for r in run.truth.values())
    waited = {rid for rid, r in run.truth.items() if r["admitted_ns"][0] >= first_finish}
    assert len(waited) == 2
    verdicts = run.verdicts()
    assert {verdicts[rid] for rid in waited} == {"admission_cap"}
    assert "admission_cap" not in {v for rid, v in verdicts.items() if rid not in waited}
    # The booted sim states its cap (inferring it from the polls is test_verdicts.py's job).
    assert run.summary["run"]["cap"] == {"value": 2, "source": "sim"}
    for rid in waited:
        assert run.stream(rid)["evidence"]["cap"] == 2


async def test_admission_cap_comes_from_the_sim_facts_in_run_json(tmp_path: Path):
    # The scenario's own sim block, its flags recorded as facts.
    summary = (await run_virtual(UNIFORM, ["sim.max_num_seqs=2"], tmp_path)).summary
    assert summary["run"]["cap"] == {"value": 2, "source": "sim"}
    streams = sorted(summary["streams"], key=lambda s: (s["ttft_s"], s["id"]))
    assert [s["completion_tokens"] for s in streams] == [200] * 4
    assert [s["verdict"] == "admission_cap" for s in streams] == [False, False, True, True]
    assert all(s["evidence"]["cap_source"] == "sim" for s in streams[2:])


async def test_preempted_stream_gets_pool_pressure(tmp_path: Path):
    # 160 blocks of 16 for four streams growing to 800 tokens (200 blocks): the last admitted
    # is preempted when the pool fills and resumes once another finishes.
    run = await run_on_sim(
        sim_config(max_model_len=2048, num_gpu_blocks=160),
        UNIFORM,
        ["groups.streams.prompt.tokens=200", "groups.streams.max_tokens=600"],
        tmp_path,
    )
    assert_full_and_exact(run, {"streams": 600})
    preempted = {rid for rid, r in run.truth.items() if r["preemptions_ns"]}
    assert len(preempted) == 1
    assert run.verdicts() == {
        rid: "pool_pressure" if rid in preempted else "admitted" for rid in run.records
    }
    (rid,) = preempted
    evidence = run.stream(rid)["evidence"]
    assert evidence["preemptions"] >= 1
    # The stall the client saw spans the engine's preemption and readmission of the stream.
    stall, row = evidence["stall"], run.truth[rid]
    assert engine_s(row["preemptions_ns"][0]) < stall["to_s"]
    assert stall["from_s"] < engine_s(row["admitted_ns"][1]) < stall["to_s"]


async def test_stream_queued_behind_a_preempted_one_gets_pool_pressure(tmp_path: Path):
    # 100 blocks: the three early streams fill it at ~330 tokens each, the last of them is
    # preempted and waits to be readmitted; the late stream, at 0.4 s, queues behind it.
    run = await run_on_sim(sim_config(max_model_len=1024, num_gpu_blocks=100), POOL, [], tmp_path)
    assert_full_and_exact(run, {"early": 600, "late": 100})
    (late,) = run.verdicts("late")
    preempted = {rid for rid, r in run.truth.items() if r["preemptions_ns"]}
    assert len(preempted) == 1 and late not in preempted
    assert run.truth[late]["admitted_ns"][0] >= min(r["finished_ns"] for r in run.truth.values())
    assert run.verdicts()[late] == "pool_pressure"


async def test_prompts_that_overflow_the_pool_get_pool_pressure(tmp_path: Path):
    # 300 blocks (4800 tokens) for four 1500-token prompts decoding 200 tokens each: three fit,
    # the fourth waits for blocks with running 3 < max_num_seqs 4, and one of the three is
    # preempted when decode fills the pool.
    run = await run_on_sim(
        sim_config(max_model_len=4096, num_gpu_blocks=300), UNIFORM, [], tmp_path
    )
    assert_full_and_exact(run, {"streams": 200})
    first_finish = min(r["finished_ns"] for r in run.truth.values())
    pool_bound = {
        rid
        for rid, r in run.truth.items()
        if r["preemptions_ns"] or r["admitted_ns"][0] >= first_finish
    }
    assert len(pool_bound) == 2
    (preempted,) = (rid for rid in pool_bound if run.truth[rid]["preemptions_ns"])
    (queued,) = pool_bound - {preempted}
    assert run.verdicts()[queued] == "pool_pressure"
    assert run.summary["run"]["cap"]["value"] in (None, 4)
    # One verdict per stream, the phase that cost it most (verdicts.py rule 5): the preempted
    # stream was admitted only when the first stream's prefill ended, then shared the budget
    # with another's prefill (its wait, prefill_hol, ~0.16 s), and its preemption stall cost
    # less (~0.11 s); the stall stays in its evidence.
    row = run.truth[preempted]
    first = min(run.truth.values(), key=lambda r: r["admitted_ns"][0])
    assert row["admitted_ns"][0] >= first["first_token_ns"]
    evidence = run.stream(preempted)["evidence"]
    assert run.verdicts()[preempted] == "prefill_hol"
    assert evidence["preemption"]["cost_s"] < evidence["held_s"]["prefill_hol"]
    stall = evidence["preemption"]["stall"]
    assert engine_s(row["preemptions_ns"][0]) < stall["to_s"]
    assert stall["from_s"] < engine_s(row["admitted_ns"][1]) < stall["to_s"]


async def test_a_single_uncontended_stream_is_admitted(tmp_path: Path):
    run = await run_on_sim(
        sim_config(),
        UNIFORM,
        ["groups.streams.count=1", "groups.streams.prompt.tokens=4000",
         "groups.streams.max_tokens=128"],
        tmp_path,
    )  # fmt: skip
    assert_full_and_exact(run, {"streams": 128})
    assert run.verdicts() == {"default/r0/streams/0": "admitted"}
    assert run.summary["run"]["prefill_baseline"]["source"] == "uncontended_streams"


# ---- 3. speculative decoding: tokens, not chunks -----------------------------------------


async def test_spec_decode_rates_are_token_true(tmp_path: Path):
    run = await run_on_sim(
        sim_config(num_speculative_tokens=3, acceptance_rate=0.7),
        UNIFORM,
        ["groups.streams.count=2", "groups.streams.prompt.tokens=1000",
         "groups.streams.max_tokens=300"],
        tmp_path,
    )  # fmt: skip
    assert_full_and_exact(run, {"streams": 300})
    decode_tokens = decode_steps = 0
    for rid, rec in run.records.items():
        steps = [n for _, _, n in run.truth[rid]["tokens_per_step_ns"]]
        # One SSE chunk per engine step, carrying every token the step emitted.
        assert rec.chunk_tokens == steps and rec.chunks == len(steps)
        row = run.stream(rid)
        window_s = (rec.t_last_ns - rec.t_first_ns) / NS
        assert row["decode_tok_s"] == pytest.approx((300 - rec.chunk_tokens[0]) / window_s)
        assert row["chunks_per_s"] == pytest.approx((len(steps) - 1) / window_s)
        factor = sum(steps[1:]) / (len(steps) - 1)
        assert row["decode_tok_s"] / row["chunks_per_s"] == pytest.approx(factor)
        decode_tokens, decode_steps = decode_tokens + sum(steps[1:]), decode_steps + len(steps) - 1
    factor = decode_tokens / decode_steps
    assert 2.0 < factor < 3.2  # 1 + 0.7 + 0.49 + 0.343 = 2.53 expected per step
    cohort = run.summary["groups"]["streams"]["cohort"]
    assert cohort["n"] == 2 and cohort["steady"] == 1
    # Client tokens over client chunks in the joint window: the steps' factor, give or take
    # which steps fall inside the window; the headline (the server's generation counter,
    # interpolated between 20 ms polls) agrees with the client's token sum.
    joint = run.summary["reps"][0]["joint_decode"]
    assert joint["token_source"] == "server_counter"
    client = joint["client"]
    assert client["tok_s"] / client["chunks_per_s"] == pytest.approx(factor, rel=0.05)
    assert joint["tok_s"] == pytest.approx(client["tok_s"], rel=0.1)
    assert cohort["agg_tok_s"] == joint["tok_s"]
    assert cohort["agg_chunks_per_s"] == client["chunks_per_s"]
    group = run.summary["groups"]["streams"]
    write_report(run.run_dir)
    report = (run.run_dir / "report.txt").read_text()
    decode = table_row(report, "Decode per group", "streams")
    assert decode[:3] == [triple(group["decode_tok_s"]), triple(group["chunks_per_s"]),
                          f"{group['tokens_per_chunk']['median']:.2f}"]  # fmt: skip
    concurrency = table_row(report, "Concurrency", "streams")
    rates_shown = [rate(cohort[k]) for k in ("per_stream_tok_s", "agg_tok_s", "agg_chunks_per_s")]
    assert concurrency[:5] == ["2", "2", *rates_shown]


def table_row(report: str, title: str, label: str) -> list[str]:
    """The cells after `label` of that row in the report.txt table whose title starts `title`;
    also checks the table has separate chunks/s and tok/s columns."""
    table = report.split("\n" + title, 1)[1].split("\n\n", 1)[0]
    header = table.splitlines()[1]
    assert "tok/s" in table.splitlines()[0] + header and "chunks/s" in header
    row = next(line for line in table.splitlines() if line.startswith(label + " "))
    return row.split()[1:]
