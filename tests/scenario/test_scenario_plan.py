"""plan() on virtual time: schedules, loops, mixes, salts and prefixes, with no clock at all."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from loadgen.scenario.load import load_scenario
from loadgen.scenario.model import (
    DURATION_REQUEST_CAP,
    MIN_PROMPT_TOKENS,
    Closed,
    Gamma,
    Group,
    Poisson,
    PromptConfig,
    Scenario,
    Staggered,
    Trace,
    TraceRow,
    Warmup,
)
from loadgen.scenario.plan import NS, Plan, PlannedRequest, plan


def group(name: str, count: int, *, cache: str = "salted", start: float = 0.0,
          tokens: int = 64, prefix: int | None = None) -> Group:  # fmt: skip
    prompt = PromptConfig(tokens, "prose", cache, prefix if cache != "salted" else None)
    return Group(name, count, prompt, max_tokens=8, start_s=start)


def scenario(*groups: Group, seed: int = 7, **kw) -> Scenario:
    return Scenario(name="t", seed=seed, groups=groups, **kw)


def measured(p: Plan) -> list[PlannedRequest]:
    return [r for r in p.requests() if r.phase == "measure"]


def gaps_s(p: Plan) -> np.ndarray:
    offsets = np.array([r.offset_ns for r in p.arms[0].reps[0].requests], dtype=float)
    return np.diff(offsets) / NS


def test_together_sends_each_group_at_its_start() -> None:
    p = plan(scenario(group("whale", 1), group("minnows", 3), group("late", 2, start=1.5)))
    (rep,) = p.arms[0].reps
    assert [(r.group, r.index, r.offset_ns) for r in rep.requests] == [
        ("whale", 0, 0), ("minnows", 0, 0), ("minnows", 1, 0), ("minnows", 2, 0),
        ("late", 0, 1_500_000_000), ("late", 1, 1_500_000_000),
    ]  # fmt: skip
    assert (rep.concurrency, rep.duration_ns, rep.primes) == (None, None, ())
    assert [r.id for r in rep.requests[:2]] == ["default/r0/whale/0", "default/r0/minnows/0"]


def test_staggered_spaces_each_group_from_its_start() -> None:
    p = plan(scenario(group("a", 3), group("b", 2, start=0.1), arrival=Staggered(0.25)))
    assert [(r.group, r.offset_ns) for r in p.arms[0].reps[0].requests] == [
        ("a", 0), ("b", 100_000_000), ("a", 250_000_000), ("b", 350_000_000), ("a", 500_000_000),
    ]  # fmt: skip


def test_poisson_schedule_is_seeded_and_keeps_its_rate() -> None:
    arrival = Poisson(rate_per_s=20.0, count=10_000)
    a = plan(scenario(group("g", 1), arrival=arrival))
    again = plan(scenario(group("g", 1), arrival=arrival))
    other = plan(scenario(group("g", 1), arrival=arrival, seed=8))
    offsets = [r.offset_ns for r in a.arms[0].reps[0].requests]
    assert offsets == [r.offset_ns for r in again.arms[0].reps[0].requests]
    assert offsets != [r.offset_ns for r in other.arms[0].reps[0].requests]
    assert len(offsets) == 10_000 and offsets[0] == 0 and offsets == sorted(offsets)
    rate = (len(offsets) - 1) / (offsets[-1] / NS)
    assert rate == pytest.approx(20.0, rel=0.05)
    cv = gaps_s(a).std() / gaps_s(a).mean()
    assert cv == pytest.approx(1.0, rel=0.05)


@pytest.mark.parametrize("burstiness", [0.5, 4.0])
def test_gamma_burstiness_sets_the_gap_cv(burstiness: float) -> None:
    p = plan(scenario(group("g", 1), arrival=Gamma(5.0, burstiness, count=10_000)))
    gaps = gaps_s(p)
    assert gaps.mean() == pytest.approx(1 / 5.0, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(burstiness**-0.5, rel=0.05)


def test_open_loop_duration_bounds_the_schedule() -> None:
    p = plan(scenario(group("g", 1), arrival=Poisson(rate_per_s=50.0, duration_s=60.0)))
    (rep,) = p.arms[0].reps
    offsets = [r.offset_ns for r in rep.requests]
    assert max(offsets) < 60 * NS
    assert len(offsets) == pytest.approx(3000, rel=0.05)
    assert rep.duration_ns == 60 * NS
    capped = plan(scenario(group("g", 1), arrival=Poisson(50.0, count=10, duration_s=60.0)))
    assert [r.offset_ns for r in capped.arms[0].reps[0].requests] == offsets[:10]


def test_closed_loop_has_no_offsets_and_mixes_groups_by_count() -> None:
    p = plan(scenario(group("a", 3), group("b", 1), arrival=Closed(concurrency=2, count=8)))
    (rep,) = p.arms[0].reps
    assert rep.concurrency == 2
    assert all(r.offset_ns is None for r in rep.requests)
    assert [(r.group, r.index) for r in rep.requests] == [
        ("a", 0), ("a", 1), ("b", 0), ("a", 2), ("a", 3), ("a", 4), ("b", 1), ("a", 5),
    ]  # fmt: skip


def test_closed_loop_defaults() -> None:
    one_pass = plan(scenario(group("a", 2), group("b", 1), arrival=Closed(concurrency=1)))
    assert Counter(r.group for r in measured(one_pass)) == {"a": 2, "b": 1}
    timed = plan(scenario(group("a", 1), arrival=Closed(concurrency=4, duration_s=30.0)))
    (rep,) = timed.arms[0].reps
    assert (len(rep.requests), rep.duration_ns) == (DURATION_REQUEST_CAP, 30 * NS)


def test_trace_rows_give_times_and_sizes() -> None:
    rows = (TraceRow(0, 6758, 500), TraceRow(750_000_000, 8, 3), TraceRow(2 * NS, 900, 40))
    s = scenario(group("a", 1), arrival=Trace(None, "mooncake", None, 0.5, rows))  # type: ignore[arg-type]
    reqs = plan(s).arms[0].reps[0].requests
    assert [(r.offset_ns, r.prompt.tokens, r.max_tokens) for r in reqs] == [
        (0, 6758, 500), (750_000_000, 16, 3), (2 * NS, 900, 40),
    ]  # fmt: skip


def test_salts_are_deterministic_unique_and_never_read_the_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_clock(*_: object) -> float:
        raise AssertionError("plan() read the clock")

    for name in ("time", "time_ns", "perf_counter", "perf_counter_ns", "monotonic"):
        monkeypatch.setattr(time, name, no_clock)
    s = scenario(group("a", 4), group("b", 2), repetitions=3, warmup=Warmup(2))
    first, second = plan(s, run_seed=11), plan(s, run_seed=11)
    assert first == second
    salts = [r.prompt.salt for r in first.requests()]
    assert len(set(salts)) == len(salts) == 2 + 3 * 6
    # The first word of every tag differs (a cache block chain cannot even start to match).
    assert len({salt.split("-")[0] for salt in salts}) == len(salts)
    other = plan(s, run_seed=12)
    assert not set(salts) & {r.prompt.salt for r in other.requests()}
    # Text and schedule come from the scenario seed, not the run seed.
    assert [r.prompt.text_seed for r in other.requests()] == [
        r.prompt.text_seed for r in first.requests()
    ]
    assert (first.seed, plan(s).seed) == (11, 7)


def test_shared_prefix_per_rep_primed_prefix_per_arm() -> None:
    s = scenario(
        group("doc", 2, cache="shared", tokens=400, prefix=300),
        group("whale", 1, cache="primed", tokens=2000, prefix=1936),
        group("solo", 1),
        repetitions=2,
    )
    reps = plan(s).arms[0].reps
    shared = [[r.prompt for r in rep.requests if r.group == "doc"] for rep in reps]
    assert [len({p.prefix_key for p in ps}) for ps in shared] == [1, 1]
    assert shared[0][0].prefix_key != shared[1][0].prefix_key
    assert shared[0][0].salt == shared[0][1].salt
    assert shared[0][0].text_seed != shared[0][1].text_seed
    assert (shared[0][0].prefix_tokens, shared[0][0].tokens) == (300, 400)
    whales = [next(r.prompt for r in rep.requests if r.group == "whale") for rep in reps]
    assert whales[0].prefix_key == whales[1].prefix_key
    assert whales[0].text_seed != whales[1].text_seed
    for rep, whale in zip(reps, whales, strict=True):
        (prime,) = rep.primes
        assert (prime.tokens, prime.prefix_tokens, prime.cache) == (1936, 1936, "primed")
        assert (prime.prefix_key, prime.salt, prime.prefix_seed) == (
            whale.prefix_key, whale.salt, whale.prefix_seed,
        )  # fmt: skip


def test_warmups_are_salted_and_come_first() -> None:
    s = scenario(group("a", 1, cache="primed", prefix=48), warmup=Warmup(3, 32, 2))
    (arm,) = plan(s).arms
    assert [(r.id, r.phase, r.prompt.cache, r.prompt.tokens, r.max_tokens) for r in arm.warmup] == [
        ("default/warmup/a/0", "warmup", "salted", 32, 2),
        ("default/warmup/a/1", "warmup", "salted", 32, 2),
        ("default/warmup/a/2", "warmup", "salted", 32, 2),
    ]


def test_sweeps_plan_every_arm_with_fresh_salts() -> None:
    ladder = plan(load_scenario("ladder"), run_seed=3)
    assert [a.name for a in ladder.arms] == [f"groups.streams.count={n}" for n in (1, 2, 4, 8)]
    assert [[len(rep.requests) for rep in a.reps] for a in ladder.arms] == [
        [1, 1], [2, 2], [4, 4], [8, 8],
    ]  # fmt: skip
    salts = [r.prompt.salt for r in ladder.requests()]
    assert len(salts) == len(set(salts)) == 30
    ids = [r.id for r in ladder.requests()]
    assert len(ids) == len(set(ids))
    polite = plan(load_scenario("politeness"))
    assert [a.flags for a in polite.arms] == [
        {"max_num_batched_tokens": n} for n in (2048, 1024, 512)
    ]
    assert [r.arm for r in polite.arms[2].reps[0].requests] == ["max_num_batched_tokens=512"] * 4


def test_requests_carry_the_api_and_pinned_template() -> None:
    (first, *_) = plan(load_scenario("whale_c4_cached")).requests()
    assert (first.api, first.chat_template_kwargs, first.ignore_eos) == (
        "chat", {"enable_thinking": False}, True,
    )  # fmt: skip


def test_a_group_built_in_code_is_planned_at_its_size_and_a_trace_row_at_the_floor() -> None:
    # `loadgen request --prompt-tokens 1` is a group of 1-token prompts: sent at 1 (the
    # builder trims the salt tag to fit); a trace row of 3 tokens is raised to the floor.
    tiny = Group("request", 2, PromptConfig(1, "prose", "salted"), 4)
    closed = Scenario("request", 1, (tiny,), arrival=Closed(1, count=2))
    assert [r.prompt.tokens for r in plan(closed).requests()] == [1, 1]
    rows = (TraceRow(0, 3, 4), TraceRow(NS, 40, 4))
    trace = Trace(Path("t.jsonl"), "mooncake", None, 1.0, rows)
    unsized = Group("replay", 2, PromptConfig(None, "prose", "salted"), None)
    replay = Scenario("replay", 1, (unsized,), arrival=trace)
    assert [r.prompt.tokens for r in plan(replay).requests()] == [MIN_PROMPT_TOKENS, 40]
