"""The simulated engine on virtual time: scheduling, chunked prefill, preemption, prefix cache,
speculative decoding, counters and ground truth."""

import math
from collections import defaultdict

import pytest

from loadgen.sim.engine import AdmissionRejected, Engine, EngineConfig, SimRequest, Step
from loadgen.sim.profiles import sim_profile
from loadgen.sim.tokenizer import SimTokenizer, render_chat

TOK = SimTokenizer()
RTX4090 = sim_profile("rtx4090-long")
WHALE = 72_631
MINNOW = 4096


def prompt(n: int, seed: int) -> list[int]:
    return TOK.generator(seed).take(n)


def truth(engine: Engine) -> dict[str, dict]:
    return {row["request_id"]: row for row in engine.ground_truth()}


def outputs_by_request(steps: list[Step]) -> dict[str, list[tuple[int, ...]]]:
    out: dict[str, list[tuple[int, ...]]] = defaultdict(list)
    for step in steps:
        for o in step.outputs:
            out[o.request_id].append(o.token_ids)
    return out


def decode_rate(row: dict, t0: float, t1: float) -> float:
    """Tokens per second a request received between two engine times."""
    ends = [(end, n) for _, end, n in row["tokens_per_step"] if t0 < end <= t1]
    return sum(n for _, n in ends[1:]) / (ends[-1][0] - ends[0][0])


# -- FCFS, admission cap ------------------------------------------------------------------


def test_admission_cap_runs_max_num_seqs_and_queues_the_rest() -> None:
    e = Engine(EngineConfig(max_num_seqs=2))
    for i in range(4):
        e.add_request(SimRequest(f"r{i}", prompt(100, i), max_tokens=20))
    e.step()
    assert (e.num_requests_running, e.num_requests_waiting) == (2, 2)
    assert e.kv_cache_usage_perc < 0.5
    e.run_until_idle()
    rows = truth(e)
    firsts = [rows[f"r{i}"]["first_token_s"] for i in range(4)]
    assert firsts == sorted(firsts)
    # r2 is admitted in the step after r0 finishes, not before
    assert rows["r2"]["admitted_s"][0] == rows["r0"]["finished_s"]


def test_first_token_comes_from_the_step_that_completes_prefill() -> None:
    e = Engine(EngineConfig())
    e.add_request(SimRequest("a", prompt(5000, 1), max_tokens=3))
    steps = e.run_until_idle()
    row = truth(e)["a"]
    assert [c[3] for c in row["prefill_chunks"]] == [2048, 2048, 904]
    assert [len(s.outputs) for s in steps] == [0, 0, 1, 1, 1]
    assert steps[2].outputs[0].completion_tokens_so_far == 1
    assert row["first_token_s"] == steps[2].start_s + steps[2].duration_s
    assert e.ttft_samples == [row["first_token_s"]]
    assert e.prompt_tokens_total == 5000
    assert e.iteration_tokens == [2048, 2048, 904, 1, 1]
    # vLLM's iteration_tokens_total sees the steps that emit: the prompt whole with its first
    # token, then one token a step; the two chunks still under way are not counted.
    assert e.emitting_step_tokens == [5001, 1, 1]


# -- chunked prefill: the whale and the minnows ------------------------------------------------


def whale_and_minnows(budget: int, *, whale_first: bool, n_minnows: int = 3, **cfg) -> Engine:
    e = Engine(EngineConfig(max_num_batched_tokens=budget, profile=RTX4090, **cfg))
    whale = SimRequest("whale", prompt(WHALE, 0), max_tokens=256)
    minnows = [
        SimRequest(f"m{i}", prompt(MINNOW, 10 + i), max_tokens=256) for i in range(n_minnows)
    ]
    for r in [whale, *minnows] if whale_first else [*minnows, whale]:
        e.add_request(r)
    return e


@pytest.mark.parametrize("budget", [2048, 512])
def test_a_whale_first_in_line_holds_every_minnow_until_its_prefill_ends(budget: int) -> None:
    e = whale_and_minnows(budget, whale_first=True)
    steps = e.run_until_idle()
    rows = truth(e)
    whale_prefill_steps = len(rows["whale"]["prefill_chunks"])
    assert whale_prefill_steps == math.ceil(WHALE / budget)
    for step in steps[: whale_prefill_steps - 1]:
        assert step.num_prefill_tokens == budget  # the whale's chunk is the whole budget
        assert step.outputs == ()
    for i in range(3):
        assert rows[f"m{i}"]["first_token_s"] > rows["whale"]["first_token_s"]


def test_minnows_ahead_of_the_whale_go_live_during_its_prefill_and_ration() -> None:
    e = whale_and_minnows(512, whale_first=False)
    e.run_until_idle()
    rows = truth(e)
    whale_first_token = rows["whale"]["first_token_s"]
    assert all(rows[f"m{i}"]["first_token_s"] < 8.0 for i in range(3))  # seed: 4.5-7.6 s
    m0 = rows["m0"]
    during = decode_rate(m0, m0["first_token_s"], whale_first_token)
    after = decode_rate(m0, whale_first_token, m0["finished_s"])
    assert during < 0.2 * after


def test_one_minnow_ahead_at_2048_gets_one_token_per_whale_chunk() -> None:
    """The seed's C2 row: minnow TTFT 2.8 s, then ~1 tok/s while the whale prefills."""
    e = whale_and_minnows(2048, whale_first=False, n_minnows=1)
    steps = e.run_until_idle()
    rows = truth(e)
    assert rows["m0"]["first_token_s"] < 3.0
    shared = [s for s in steps if s.num_decode_tokens == 1 and s.num_prefill_tokens == 2047]
    assert len(shared) >= 30
    m0 = rows["m0"]
    assert decode_rate(m0, m0["first_token_s"], rows["whale"]["first_token_s"]) < 2.0


def test_a_smaller_budget_speeds_rationed_decode_and_slows_the_whale() -> None:
    rates, whale_ttft = {}, {}
    for budget in (2048, 512):
        e = whale_and_minnows(budget, whale_first=False, n_minnows=1)
        e.run_until_idle()
        rows = truth(e)
        m0, whale_first_token = rows["m0"], rows["whale"]["first_token_s"]
        rates[budget] = decode_rate(m0, m0["first_token_s"], whale_first_token)
        whale_ttft[budget] = whale_first_token
    assert rates[512] > 2 * rates[2048]
    assert whale_ttft[512] > whale_ttft[2048]


def test_long_prefill_token_threshold_lets_queued_minnows_in() -> None:
    e = whale_and_minnows(512, whale_first=True, long_prefill_token_threshold=256)
    e.run_until_idle()
    rows = truth(e)
    for i in range(3):
        assert rows[f"m{i}"]["first_token_s"] < rows["whale"]["first_token_s"]


# -- preemption ----------------------------------------------------------------------------


def run_four(num_gpu_blocks: int) -> tuple[Engine, list[Step]]:
    e = Engine(EngineConfig(max_num_seqs=4, num_gpu_blocks=num_gpu_blocks))
    for i in range(4):
        e.add_request(SimRequest(f"r{i}", prompt(100, i), max_tokens=150))
    return e, e.run_until_idle()


def test_a_small_pool_preempts_and_every_request_still_gets_every_token_once() -> None:
    e, steps = run_four(num_gpu_blocks=48)  # 4 x 250 tokens want 64 blocks
    big, big_steps = run_four(num_gpu_blocks=8192)
    assert e.num_preemptions_total > 0
    assert big.num_preemptions_total == 0
    assert max(e.iteration_tokens) <= 2048
    rows = truth(e)
    assert any(rows[f"r{i}"]["preemptions"] for i in range(4))
    got, want = outputs_by_request(steps), outputs_by_request(big_steps)
    for i in range(4):
        assert rows[f"r{i}"]["completion_tokens"] == 150
        assert sum(got[f"r{i}"], ()) == sum(want[f"r{i}"], ())  # nothing re-emitted or lost
    assert e.kv.num_blocks_used() == 0
    assert e.generation_tokens_total == 600


def test_pool_pressure_reaches_the_seeds_98_percent() -> None:
    e = Engine(EngineConfig(max_num_seqs=4, num_gpu_blocks=48))
    for i in range(4):
        e.add_request(SimRequest(f"r{i}", prompt(100, i), max_tokens=150))
    peak = 0.0
    while e.step() is not None:
        peak = max(peak, e.kv_cache_usage_perc)
    assert peak >= 0.98


# -- prefix cache --------------------------------------------------------------------------


def twice(n: int, *, salts: tuple[str | None, str | None] = (None, None), **cfg) -> Engine:
    e = Engine(EngineConfig(**cfg))
    ids = prompt(n, 42)
    for i, salt in enumerate(salts):
        e.add_request(SimRequest(f"p{i}", ids, max_tokens=2, cache_salt=salt, arrival_s=e.now_s))
        e.run_until_idle()
    return e


def test_the_same_prompt_twice_reuses_all_full_blocks() -> None:
    e = twice(8000)
    rows = truth(e)
    assert rows["p1"]["num_cached_tokens"] == 7984  # (8000 - 1) // 16 blocks
    assert (e.prefix_cache_queries_total, e.prefix_cache_hits_total) == (16_000, 7984)
    first_ttft = rows["p0"]["first_token_s"] - rows["p0"]["arrival_s"]
    second_ttft = rows["p1"]["first_token_s"] - rows["p1"]["arrival_s"]
    assert second_ttft < first_ttft / 5


@pytest.mark.parametrize(("n", "hit"), [(10, 0), (16, 0), (17, 16), (32, 16), (160, 144)])
def test_reuse_is_full_blocks_only_and_never_the_last_token(n: int, hit: int) -> None:
    assert twice(n).prefix_cache_hits_total == hit


def test_a_drafter_reuses_one_block_less() -> None:
    e = twice(160, num_speculative_tokens=3)
    assert e.prefix_cache_hits_total == 128  # the seed's (blocks - 1) x B


@pytest.mark.parametrize(("salts", "hit"), [(("a", "b"), 0), (("a", "a"), 144), ((None, "a"), 0)])
def test_cache_salt_changes_the_hashes(salts: tuple, hit: int) -> None:
    assert twice(160, salts=salts).prefix_cache_hits_total == hit


def test_a_cache_dead_boot_counts_queries_and_never_hits() -> None:
    e = twice(160, cache_dead=True)
    assert (e.prefix_cache_queries_total, e.prefix_cache_hits_total) == (320, 0)


def test_without_prefix_caching_nothing_is_queried() -> None:
    e = twice(160, enable_prefix_caching=False)
    assert (e.prefix_cache_queries_total, e.prefix_cache_hits_total) == (0, 0)


def test_lru_evicts_the_least_recently_used_blocks_tail_first() -> None:
    e = Engine(EngineConfig(num_gpu_blocks=10))
    a = prompt(64, 1)
    for rid, ids in [("a", a), ("b", prompt(64, 2)), ("c", prompt(64, 3)), ("a2", a)]:
        e.add_request(SimRequest(rid, ids, max_tokens=1, arrival_s=e.now_s))
        e.run_until_idle()
    # c's allocation took the two oldest free blocks, a's last two (freed tail first): a keeps
    # its first two; a2's own two new blocks then evict b's last two
    assert truth(e)["a2"]["num_cached_tokens"] == 32
    assert e.kv.pool.num_evictions == 4


def test_toggling_a_template_kwarg_misses_the_whole_prefix() -> None:
    messages = [{"role": "user", "content": TOK.decode(prompt(600, 5))}]
    e = Engine(EngineConfig())
    kwargs = [{"enable_thinking": True}, {"enable_thinking": True}, {"enable_thinking": False}]
    for i, kw in enumerate(kwargs):
        ids = TOK.encode(render_chat(messages, kw))
        e.add_request(SimRequest(f"t{i}", ids, max_tokens=1, arrival_s=e.now_s))
        e.run_until_idle()
    rows = truth(e)
    assert rows["t1"]["num_cached_tokens"] > 500
    assert rows["t2"]["num_cached_tokens"] == 0


# -- speculative decoding ------------------------------------------------------------------


def test_spec_decode_full_acceptance_emits_k_plus_one_tokens_per_step() -> None:
    e = Engine(EngineConfig(num_speculative_tokens=3, acceptance_rate=1.0))
    lengths = {"a": 50, "b": 21}
    for rid, n in lengths.items():
        e.add_request(SimRequest(rid, prompt(64, len(rid) + n), max_tokens=n))
    steps = e.run_until_idle()
    outs = outputs_by_request(steps)
    for rid, n in lengths.items():
        assert len(outs[rid]) == 1 + math.ceil((n - 1) / 4)
        assert [len(t) for t in outs[rid][1:-1]] == [4] * (len(outs[rid]) - 2)
    assert e.generation_tokens_total == sum(lengths.values())
    decode_steps = sum(len(o) - 1 for o in outs.values())
    assert e.spec_decode_num_drafts_total == decode_steps
    assert e.spec_decode_num_draft_tokens_total == 3 * decode_steps
    assert e.spec_decode_num_accepted_tokens_total == 3 * decode_steps
    # drafts are scheduled tokens: two decoding requests take 2 x (1 + 3) of the budget
    assert steps[1].num_decode_tokens == 8


def test_spec_decode_with_no_acceptance_emits_one_token_per_step() -> None:
    e = Engine(EngineConfig(num_speculative_tokens=3, acceptance_rate=0.0))
    e.add_request(SimRequest("a", prompt(64, 1), max_tokens=30))
    outs = outputs_by_request(e.run_until_idle())["a"]
    assert [len(t) for t in outs] == [1] * 30
    assert e.spec_decode_num_accepted_tokens_total == 0


def test_spec_decode_is_deterministic_and_accepts_per_position() -> None:
    def run() -> Engine:
        e = Engine(EngineConfig(num_speculative_tokens=3, acceptance_rate=0.5, seed=9))
        for i in range(4):
            e.add_request(SimRequest(f"r{i}", prompt(64, i), max_tokens=1000))
        e.run_until_idle()
        return e

    a, b = run(), run()
    assert a.ground_truth() == b.ground_truth()
    per_draft = a.spec_decode_num_accepted_tokens_total / a.spec_decode_num_draft_tokens_total
    assert per_draft == pytest.approx((0.5 + 0.25 + 0.125) / 3, abs=0.03)


# -- time, limits, aborts ------------------------------------------------------------------


def test_drift_stretches_steps_with_engine_time() -> None:
    durations = []
    for drift in (0.0, 1.0):
        e = Engine(EngineConfig(drift_per_hour=drift))
        e.now_s = 3600.0
        e.add_request(SimRequest("a", prompt(10, 1), max_tokens=1, arrival_s=3600.0))
        durations.append(e.step().duration_s)
    assert durations[1] == pytest.approx(2 * durations[0])


def test_a_future_arrival_waits_and_an_idle_engine_jumps_to_it() -> None:
    e = Engine(EngineConfig())
    e.add_request(SimRequest("a", prompt(10, 1), max_tokens=1, arrival_s=5.0))
    assert e.num_requests_waiting == 0
    step = e.step()
    assert step.start_s == 5.0
    assert truth(e)["a"]["admitted_s"] == [5.0]


def test_aborting_a_request_before_it_arrives_skips_it() -> None:
    e = Engine(EngineConfig())
    e.add_request(SimRequest("early", prompt(10, 1), max_tokens=1, arrival_s=1.0))
    e.add_request(SimRequest("late", prompt(10, 2), max_tokens=1, arrival_s=2.0))
    e.abort_request("early")
    assert [s.start_s for s in e.run_until_idle()] == [2.0]
    assert [r["finish_reason"] for r in e.ground_truth()] == ["abort", "length"]


def test_max_waiting_rejects_admission() -> None:
    e = Engine(EngineConfig(max_waiting=2))
    e.add_request(SimRequest("a", [1], max_tokens=1))
    e.add_request(SimRequest("b", [1], max_tokens=1))
    with pytest.raises(AdmissionRejected):
        e.add_request(SimRequest("c", [1], max_tokens=1))


@pytest.mark.parametrize(
    ("req", "message"),
    [
        (SimRequest("x", [], max_tokens=1), "at least one token"),
        (SimRequest("x", [1], max_tokens=0), "max_tokens"),
        (SimRequest("x", [-1], max_tokens=1), "token ids"),
        (SimRequest("x", [1] * 100, max_tokens=61), "never fit"),
    ],
)
def test_bad_requests_are_refused(req: SimRequest, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Engine(EngineConfig(num_gpu_blocks=10)).add_request(req)


def test_abort_frees_blocks_and_the_rest_carry_on() -> None:
    e = Engine(EngineConfig(max_num_seqs=1))
    e.add_request(SimRequest("a", prompt(3000, 1), max_tokens=50))
    e.add_request(SimRequest("b", prompt(100, 2), max_tokens=5))
    e.add_request(SimRequest("c", prompt(100, 3), max_tokens=5))
    e.step()
    assert e.kv.num_blocks_used() == 128
    e.abort_request("a")
    e.abort_request("c")
    e.abort_request("nope")
    assert e.kv.num_blocks_used() == 0
    e.run_until_idle()
    rows = truth(e)
    assert [rows[r]["finish_reason"] for r in "abc"] == ["abort", "length", "abort"]
    assert rows["b"]["completion_tokens"] == 5
    assert not e.has_unfinished()


def test_a_duplicate_request_id_is_refused() -> None:
    e = Engine(EngineConfig())
    e.add_request(SimRequest("a", [1], max_tokens=1))
    with pytest.raises(ValueError, match="already used"):
        e.add_request(SimRequest("a", [1], max_tokens=1))


# -- scale ---------------------------------------------------------------------------------


def test_a_thousand_requests_all_finish_exactly_and_the_pool_empties() -> None:
    cfg = EngineConfig(max_num_seqs=128, num_gpu_blocks=1200)
    e = Engine(cfg)
    shared = prompt(200, 7)
    want = {}
    for i in range(1000):
        own = prompt(20 + i % 280, 1000 + i)
        ids = shared + own if i % 3 == 0 else own
        want[f"r{i}"] = 1 + (i * 37) % 64
        e.add_request(SimRequest(f"r{i}", ids, max_tokens=want[f"r{i}"], arrival_s=i * 0.001))
    emitted: dict[str, int] = defaultdict(int)
    while (step := e.step()) is not None:
        assert step.num_scheduled_tokens <= cfg.max_num_batched_tokens
        assert e.num_requests_running <= cfg.max_num_seqs
        for o in step.outputs:
            emitted[o.request_id] += len(o.token_ids)
    assert emitted == want
    assert {r["request_id"]: r["completion_tokens"] for r in e.ground_truth()} == want
    assert e.generation_tokens_total == sum(want.values())
    assert e.num_preemptions_total > 0
    assert e.prefix_cache_hits_total > 0
    assert e.kv.num_blocks_used() == 0
    assert len(e.ttft_samples) == 1000


def test_ground_truth_rows_add_up() -> None:
    e = Engine(EngineConfig(max_num_seqs=2, num_gpu_blocks=40))
    for i in range(3):
        e.add_request(SimRequest(f"r{i}", prompt(150, i), max_tokens=120))
    e.run_until_idle()
    for row in e.ground_truth():
        assert sum(n for *_, n in row["tokens_per_step"]) == row["completion_tokens"] == 120
        assert row["tokens_per_step"][0][1] == row["first_token_s"]
        assert row["finished_s"] == row["tokens_per_step"][-1][1]
        assert len(row["admitted_s"]) == 1 + len(row["preemptions"])
        recomputed = sum(c[3] for c in row["prefill_chunks"])
        assert recomputed >= row["num_prompt_tokens"] - row["num_cached_tokens"]
