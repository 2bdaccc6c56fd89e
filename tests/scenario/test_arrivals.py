"""Arrivals a vllm bench serve user expects: a rate with a seat cap, and request-rate ramps.

Timing is judged on the virtual clock, where every instant is exact: a capped run's sends are
its schedule's arrivals, or the end of an earlier stream when every seat was taken."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from loadgen.cli import main
from loadgen.records import StreamRecord, read_streams
from loadgen.report.cmd import render_report
from loadgen.scenario.load import ScenarioError, load_scenario
from loadgen.scenario.model import Gamma, Poisson, Ramp
from loadgen.scenario.plan import arrival_offsets, plan

from support.paths import DATA
from support.virtual import run_virtual

UNIFORM = DATA / "scenarios" / "verdict_uniform.yaml"
SEED = 5  # verdict_uniform's own seed: the plan's schedule comes from it


def _arrival(kind: str, body: str) -> list[str]:
    return [f"arrival={{{kind}: {{{body}}}}}", "groups.streams.max_tokens=40"]


def _in_flight_at_sends(recs: list[StreamRecord]) -> list[int]:
    """Streams in flight at each send, the sender included (half-open [sent, done))."""
    return [
        sum(o.t_sent_ns <= r.t_sent_ns < o.t_done_ns for o in recs)  # type: ignore[operator]
        for r in recs
    ]


async def test_a_binding_cap_holds_in_flight_and_records_each_wait(tmp_path: Path):
    run = await run_virtual(UNIFORM, _arrival("poisson", "rate_per_s: 40, concurrency: 2, "
                                              "count: 24"), tmp_path)  # fmt: skip
    recs = sorted(run.records.values(), key=lambda r: (r.t_intended_ns, r.id))
    assert len(recs) == 24 and all(r.status == "ok" for r in recs)
    assert _in_flight_peak(recs) == 2
    schedule = arrival_offsets(Poisson(40.0, 24), SEED, 24)
    by_index = {int(r.id.rsplit("/", 1)[1]): r for r in recs}
    ends = {r.t_done_ns for r in recs}
    waited = 0
    for i, arrival_ns in enumerate(schedule):
        r = by_index[i]
        assert r.seat_wait_ns is not None and r.seat_wait_ns >= 0
        # The send is intended at the seat's instant: arrival + its wait, never earlier.
        assert r.t_intended_ns == arrival_ns + r.seat_wait_ns
        if r.seat_wait_ns:
            waited += 1
            assert r.t_intended_ns in ends  # a seat freed by an earlier stream's end
    # 40/s against two seats of ~196 ms streams (median E2E): 22 of 24 waited when measured.
    assert waited >= 5
    seat = run.summary["groups"]["streams"]["seat_wait"]
    assert (seat["capped"], seat["waited"]) == (24, waited)
    assert seat["ms"]["max"] == pytest.approx(max(r.seat_wait_ns or 0 for r in recs) / 1e6)
    assert "Seat waits (arrival concurrency cap)" in render_report(run.run_dir)


async def test_a_cap_that_does_not_bind_sends_the_rates_schedule_exactly(tmp_path: Path):
    body = "rate_per_s: 5, burstiness: 0.5, count: 12"
    free = await run_virtual(UNIFORM, _arrival("gamma", body), tmp_path / "free")
    capped = await run_virtual(UNIFORM, _arrival("gamma", body + ", concurrency: 64"),
                               tmp_path / "capped")  # fmt: skip
    schedule = arrival_offsets(Gamma(5.0, 0.5, 12), SEED, 12)

    def intended(recs: dict[str, StreamRecord]) -> list[int]:
        return [recs[f"default/r0/streams/{i}"].t_intended_ns for i in range(12)]

    assert intended(capped.records) == intended(free.records) == schedule
    assert {r.seat_wait_ns for r in capped.records.values()} == {0}
    assert {r.seat_wait_ns for r in free.records.values()} == {None}
    assert capped.summary["groups"]["streams"]["seat_wait"]["waited"] == 0
    assert "seat_wait" not in free.summary["groups"]["streams"]
    assert "Seat waits" not in render_report(free.run_dir)


async def test_a_capped_duration_seats_no_arrival_after_its_end(tmp_path: Path):
    run = await run_virtual(UNIFORM, _arrival("poisson", "rate_per_s: 200, concurrency: 1, "
                                              "count: 40, duration_s: 0.15"), tmp_path)  # fmt: skip
    recs = list(run.records.values())
    assert 1 < len(recs) < 40
    assert all(r.t_intended_ns < 0.15e9 for r in recs)


def test_a_flat_ramp_is_the_constant_rates_schedule() -> None:
    flat = Poisson(None, 500, ramp=Ramp("exponential", 8.0, 8.0))
    assert arrival_offsets(flat, 3, 500) == arrival_offsets(Poisson(8.0, 500), 3, 500)
    flat_gamma = Gamma(None, 0.7, 500, ramp=Ramp("linear", 8.0, 8.0))
    assert arrival_offsets(flat_gamma, 3, 500) == arrival_offsets(Gamma(8.0, 0.7, 500), 3, 500)


@pytest.mark.parametrize("strategy", ["linear", "exponential"])
def test_a_ramps_gaps_are_the_unit_schedule_stretched_by_its_curve(strategy: str) -> None:
    n, start, end = 200, 1.0, 20.0
    ramp = Ramp(strategy, start, end)
    got = np.array(arrival_offsets(Poisson(None, n, ramp=ramp), 9, n))
    unit = np.diff(np.array(arrival_offsets(Poisson(1.0, n), 9, n)))  # the draws at rate 1
    rates = np.array([ramp.rate_at(i, n) for i in range(1, n)])
    want = np.concatenate([[0], np.cumsum(unit / rates)])
    # Each offset is rounded to the ns once, so the rebuilt one lies within a few ns.
    assert got[0] == 0 and np.abs(got - want).max() <= n
    assert ramp.rate_at(0, n) == start and ramp.rate_at(n - 1, n) == pytest.approx(end)
    middle = (start + end) / 2 if strategy == "linear" else math.sqrt(start * end)
    assert Ramp(strategy, start, end).rate_at(50, 101) == pytest.approx(middle)


def test_a_ramp_arrives_faster_as_it_climbs() -> None:
    n = 2000
    ramp = Ramp("linear", 2.0, 50.0)
    gaps = np.diff(arrival_offsets(Poisson(None, n, ramp=ramp), 1, n)) / 1e9

    def mean_gap(lo: int, hi: int) -> float:
        return float(np.mean([1 / ramp.rate_at(i, n) for i in range(lo, hi)]))

    # The mean of 200 exponential gaps has a 7% sigma: 25% is 3.5 sigma.
    assert gaps[:200].mean() == pytest.approx(mean_gap(1, 201), rel=0.25)
    assert gaps[-200:].mean() == pytest.approx(mean_gap(n - 200, n), rel=0.25)
    assert gaps[:200].mean() > 5 * gaps[-200:].mean()


@pytest.mark.parametrize("arrival", [Poisson(8.0, 200, exact_span=True),
                                     Gamma(8.0, 0.5, 200, exact_span=True)])  # fmt: skip
def test_an_exact_span_is_benchs_schedule_whatever_the_seed(arrival: Poisson | Gamma) -> None:
    # vllm bench serve draws N gaps and scales them so the last arrives at N / rate: 200 at 8/s
    # end at 25 s for any seed, where the plain schedule's end moves with the draws.
    ends = {arrival_offsets(arrival, seed, 200)[-1] for seed in (1, 2, 3)}
    assert ends == {25 * 10**9}
    plain = Gamma(8.0, 0.5, 200) if isinstance(arrival, Gamma) else Poisson(8.0, 200)
    assert len({arrival_offsets(plain, seed, 200)[-1] for seed in (1, 2, 3)}) == 3
    # The same draws, one more of them: the plain schedule of 201, less its 0, scaled (both
    # rounded to the ns, so within 2 ns of each other).
    got = np.array(arrival_offsets(arrival, 4, 200))
    drawn = np.array(arrival_offsets(plain, 4, 201)[1:], dtype=float)
    assert got[0] > 0 and np.abs(got - drawn * 25e9 / drawn[-1]).max() <= 2


async def test_a_ramp_runs_on_the_virtual_clock_at_its_planned_instants(tmp_path: Path):
    body = "ramp: {strategy: exponential, start_rate_per_s: 2, end_rate_per_s: 40}, count: 10"
    run = await run_virtual(UNIFORM, _arrival("poisson", body), tmp_path)
    ramp = Poisson(None, 10, ramp=Ramp("exponential", 2.0, 40.0))
    planned = [r.offset_ns for r in plan(load_scenario(UNIFORM, _arrival("poisson", body)))
               .arms[0].reps[0].requests]  # fmt: skip
    assert planned == arrival_offsets(ramp, SEED, 10)
    got = [run.records[f"default/r0/streams/{i}"].t_intended_ns for i in range(10)]
    assert got == planned


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("rate_per_s: 2, ramp: {strategy: linear, start_rate_per_s: 1, end_rate_per_s: 2}",
         "arrival.poisson.ramp: give rate_per_s or a ramp, not both"),
        ("ramp: {strategy: linear, start_rate_per_s: 1, end_rate_per_s: 2}, duration_s: 5",
         "arrival.poisson.ramp: a ramp runs over `count` requests"),
        ("ramp: {strategy: steep, start_rate_per_s: 1, end_rate_per_s: 2}",
         "arrival.poisson.ramp.strategy: got 'steep' (expected one of: linear, exponential"),
        ("ramp: {strategy: linear, start_rate_per_s: 0, end_rate_per_s: 2}",
         "arrival.poisson.ramp.start_rate_per_s: got 0"),
        ("rate_per_s: 2, concurrency: 0", "arrival.poisson.concurrency: got 0"),
        ("rate_per_s: 2, duration_s: 5, exact_span: true",
         "arrival.poisson.exact_span: scales `count` arrivals to count / rate_per_s: give a "
         "count and rate_per_s, no ramp or duration_s"),
        ("rate_per_s: 2, count: 9, duration_s: 5, exact_span: true",
         "arrival.poisson.exact_span: scales `count` arrivals"),
        ("ramp: {strategy: linear, start_rate_per_s: 1, end_rate_per_s: 2}, count: 5, "
         "exact_span: true", "arrival.poisson.exact_span: scales `count` arrivals"),
    ],
)  # fmt: skip
def test_bad_caps_and_ramps_are_refused_in_one_line(body: str, message: str) -> None:
    with pytest.raises(ScenarioError) as err:
        load_scenario(UNIFORM, [f"arrival={{poisson: {{{body}}}}}"])
    assert message in str(err.value)
    assert "Traceback" not in str(err.value)


def _in_flight_peak(recs: list[StreamRecord]) -> int:
    return max(_in_flight_at_sends(recs), default=0)


def test_max_concurrency_caps_every_rate_arm_on_the_command_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, [
        "run", "smoke", "--clock", "virtual", "--seed", "3", "--no-progress", "--out",
        str(tmp_path), "--rate", "50,inf", "--max-concurrency", "2", "--requests", "20",
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    (run_dir,) = tmp_path.iterdir()
    for arm in ("rate=50", "rate=inf"):
        recs = [r for r in read_streams(run_dir / "arms" / arm) if r.phase == "measure"]
        assert len(recs) == 20 and _in_flight_peak(recs) == 2
    waits = [r.seat_wait_ns for r in read_streams(run_dir / "arms" / "rate=50")
             if r.phase == "measure"]  # fmt: skip
    assert all(w is not None for w in waits) and any(waits)  # 50/s binds two seats


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "Error: --max-concurrency caps a poisson or gamma arrival, and smoke's is together"),
        (["--concurrency", "2"], "Error: --max-concurrency caps a rate; --concurrency is already"),
    ],
)
def test_max_concurrency_without_a_rate_is_refused_in_one_line(
    tmp_path: Path, extra: list[str], message: str
) -> None:
    res = CliRunner().invoke(main, ["run", "smoke", "--clock", "virtual", "--max-concurrency",
                                    "2", "--out", str(tmp_path), *extra])  # fmt: skip
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output
