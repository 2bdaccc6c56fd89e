"""The runner: real-time delivery on an absolute schedule, speed factor, idle wake-up, aborts, and
1,000 concurrent requests on a virtual clock."""

import asyncio
import time

import pytest

from loadgen.sim.engine import AdmissionRejected, Engine, EngineConfig, SimRequest, TokenOutput
from loadgen.sim.profiles import StepProfile
from loadgen.sim.runner import SimRunner, VirtualClock

STEP_20MS = StepProfile(
    "flat-20ms", fixed_s=0.02, per_token_s=0.0, decode_ctx_s=0.0, prefill_ctx_s=0.0
)
MS = 1_000_000


async def collect(queue: asyncio.Queue[TokenOutput]) -> list[tuple[int, TokenOutput]]:
    """Every output of one request with the perf_counter_ns at which it was received."""
    got = []
    while True:
        out = await queue.get()
        got.append((time.perf_counter_ns(), out))
        if out.finished:
            return got


@pytest.mark.parametrize("speed", [1.0, 2.0])
async def test_outputs_arrive_when_their_step_ends_scaled_by_speed(speed: float) -> None:
    engine = Engine(EngineConfig(profile=STEP_20MS))
    runner = SimRunner(engine, speed=speed)
    await runner.start()
    t0 = time.perf_counter_ns()
    got = await collect(runner.submit(SimRequest("a", [1, 2, 3], max_tokens=10)))
    elapsed_s = (time.perf_counter_ns() - t0) / 1e9
    await runner.stop()
    assert [o.completion_tokens_so_far for _, o in got] == list(range(1, 11))
    # 10 steps of 20 ms of engine time; loose bounds: the machine is shared
    assert 0.2 / speed * 0.95 <= elapsed_s < 0.2 / speed + 0.25
    row = engine.ground_truth()[0]
    for (received_ns, _), (_, end_s, _) in zip(got, row["tokens_per_step"], strict=True):
        due_ns = runner.wall_ns(end_s)
        assert received_ns >= due_ns - MS  # never before the step has ended (1 ms timer slack)
        assert received_ns - due_ns < 100 * MS


async def test_an_idle_runner_sleeps_until_a_request_comes() -> None:
    engine = Engine(EngineConfig(profile=STEP_20MS))
    runner = SimRunner(engine, speed=2.0)
    await runner.start()
    await asyncio.sleep(0.05)  # the scenario: 50 ms with nothing to do
    assert engine.now_s == 0.0
    req = SimRequest("a", [1, 2, 3], max_tokens=2)
    queue = runner.submit(req)
    assert req.arrival_s >= 0.1  # 50 ms of wall time at speed 2
    await collect(queue)
    await runner.stop()
    assert engine.ground_truth()[0]["admitted_s"] == [req.arrival_s]


async def test_abort_frees_the_blocks_and_the_runner_carries_on() -> None:
    engine = Engine(EngineConfig(max_num_seqs=1))
    runner = SimRunner(engine, clock=VirtualClock())
    await runner.start()
    queue = runner.submit(SimRequest("long", list(range(5, 500)), max_tokens=5000))
    first = await queue.get()
    assert first.completion_tokens_so_far >= 1
    assert engine.kv.num_blocks_used() > 0
    runner.abort("long")
    assert engine.kv.num_blocks_used() == 0
    got = await collect(runner.submit(SimRequest("next", [7, 8, 9], max_tokens=3)))
    await runner.stop()
    assert got[-1][1].completion_tokens_so_far == 3
    assert [r["finish_reason"] for r in engine.ground_truth()] == ["abort", "length"]


async def test_a_full_waiting_queue_rejects_at_submit() -> None:
    runner = SimRunner(Engine(EngineConfig(max_waiting=1)), clock=VirtualClock())
    runner.submit(SimRequest("a", [1], max_tokens=1))
    with pytest.raises(AdmissionRejected):
        runner.submit(SimRequest("b", [1], max_tokens=1))


async def test_a_thousand_concurrent_requests_on_a_virtual_clock() -> None:
    engine = Engine(EngineConfig(max_num_seqs=256, num_gpu_blocks=2000))
    runner = SimRunner(engine, speed=1.0, clock=VirtualClock())
    await runner.start()
    want = {f"r{i}": 1 + i % 50 for i in range(1000)}
    queues = {
        rid: runner.submit(SimRequest(rid, list(range(1, 30 + int(rid[1:]) % 200)), n))
        for rid, n in want.items()
    }
    results = await asyncio.gather(*(collect(q) for q in queues.values()))
    await runner.stop()
    got = {
        rid: sum(len(o.token_ids) for _, o in outs)
        for rid, outs in zip(queues, results, strict=True)
    }
    assert got == want
    assert all(outs[-1][1].finish_reason == "length" for outs in results)
    assert engine.kv.num_blocks_used() == 0
    assert not engine.has_unfinished()


async def test_an_arrival_in_the_past_starts_an_idle_engine_at_that_arrival() -> None:
    engine = Engine(EngineConfig(profile=STEP_20MS))
    clock = VirtualClock()
    runner = SimRunner(engine, clock=clock)
    await runner.start()
    await clock.sleep_until(1_000 * MS)  # idle until 1 s
    req = SimRequest("a", [1, 2, 3], max_tokens=2)
    got = await collect(runner.submit(req, arrival_s=0.97))  # received 30 ms ago
    await runner.stop()
    row = engine.ground_truth()[0]
    assert req.arrival_s == row["arrival_s"] == 0.97
    assert row["admitted_s"] == [0.97]
    assert row["first_token_s"] == pytest.approx(0.99)
    assert len(got) == 2


async def test_an_arrival_in_the_past_joins_the_step_after_the_one_being_run() -> None:
    engine = Engine(EngineConfig(profile=STEP_20MS))
    runner = SimRunner(engine, clock=VirtualClock())
    await runner.start()
    first = runner.submit(SimRequest("a", [1, 2, 3], max_tokens=10))
    await first.get()  # step 0 (0-20 ms) delivered; the runner is inside step 1 (20-40 ms)
    assert engine.now_s == pytest.approx(0.04)
    late = SimRequest("b", [4, 5, 6], max_tokens=1)
    await collect(runner.submit(late, arrival_s=0.01))
    await runner.stop()
    row = {r["request_id"]: r for r in engine.ground_truth()}["b"]
    # It arrived during step 0, but step 1 was computed before it was submitted.
    assert row["arrival_s"] == 0.01
    assert row["admitted_s"] == [pytest.approx(0.04)]


async def test_an_arrival_after_now_is_clamped_to_now() -> None:
    runner = SimRunner(Engine(EngineConfig(profile=STEP_20MS)), clock=VirtualClock())
    await runner.start()
    req = SimRequest("a", [1, 2, 3], max_tokens=1)
    await collect(runner.submit(req, arrival_s=5.0))
    await runner.stop()
    assert req.arrival_s == 0.0
