"""`--until-precise metric_pNN=margin`: the order-statistic interval, the grammar, and on the
virtual clock a run that stops at exactly the n the interval predicts, never past its plan."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from loadgen.analysis.inputs import read_manifest
from loadgen.analysis.precision import PrecisionTarget, ci_ranks, parse_precise
from loadgen.analysis.summary import analyze_run
from loadgen.cli import main
from loadgen.clock import ClockName
from loadgen.engine.run import RunOptions, run_plan
from loadgen.records import StreamRecord, read_streams
from loadgen.run_manifest import UntilPrecise
from loadgen.scenario.load import load_scenario
from loadgen.scenario.plan import plan

PLANNED = 300
SCENARIO = f"""
name: precise
api: completions
seed: 7
arrival: ARRIVAL
groups:
  - name: g
    count: {PLANNED}
    prompt: {{tokens: 128, shape: prose, cache: salted}}
    max_tokens: 16
sim:
  profile: tiny
  max_num_seqs: 8
  max_num_batched_tokens: 256
  block_size: 16
  num_gpu_blocks: 1024
  max_model_len: 1024
"""


def exact_ranks(n: int, p: float) -> tuple[int, int] | None:
    """The 95% interval's ranks from the binomial's own sums (not scipy's)."""
    pmf = [math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n + 1)]
    cdf = list(np.cumsum(pmf))
    lows = [r for r in range(1, n + 1) if cdf[r - 1] <= 0.025]
    highs = [s for s in range(1, n + 1) if cdf[s - 1] >= 0.975]
    return (lows[-1], highs[0]) if lows and highs else None


def expected_stop(values: list[float], p: float, margin: float) -> int | None:
    """The first n whose first n values pin the p-quantile within `margin`, by hand."""
    for n in range(1, len(values) + 1):
        xs = sorted(values[:n])
        ranks = exact_ranks(n, p)
        if ranks is None:
            continue
        est = float(np.percentile(xs, p * 100))
        lo, hi = xs[ranks[0] - 1], xs[ranks[1] - 1]
        if est and max(est - lo, hi - est) / est <= margin:
            return n
    return None


def ttft(r: StreamRecord) -> float:
    assert r.t_first_ns is not None and r.t_sent_ns is not None
    return (r.t_first_ns - r.t_sent_ns) / 1e9


async def precise_run(tmp_path: Path, arrival: str, *targets: PrecisionTarget) -> Path:
    path = tmp_path / "precise.yaml"
    path.write_text(SCENARIO.replace("ARRIVAL", arrival))
    opts = RunOptions(out_root=tmp_path / "runs", progress=False, run_seed=3,
                      clock=ClockName.VIRTUAL, until_precise=targets)  # fmt: skip
    return await run_plan(plan(load_scenario(str(path), []), run_seed=3), opts, warn=print)


@pytest.mark.parametrize("n,p", [(36, 0.9), (50, 0.9), (200, 0.5), (400, 0.99), (1000, 0.9)])
def test_the_interval_ranks_are_the_binomials(n: int, p: float) -> None:
    assert ci_ranks(n, p) == exact_ranks(n, p)


def test_too_few_values_have_no_interval() -> None:
    assert ci_ranks(35, 0.9) is None and exact_ranks(35, 0.9) is None
    assert ci_ranks(5, 0.5) is None and ci_ranks(6, 0.5) == (1, 6)


def test_the_grammar_and_its_one_line_errors() -> None:
    assert parse_precise("ttft_p90=5%") == PrecisionTarget("ttft", 0.9, 0.05)
    assert parse_precise("e2e_p99=0.02") == PrecisionTarget("e2e", 0.99, 0.02)
    for bad, why in [("ttft=5%", "expected metric_pNN=margin"), ("nope_p90=5%", "metrics:"),
                     ("ttft_p100=5%", "pNN must be in"), ("ttft_p90=x", "is not a margin"),
                     ("ttft_p90=0%", "margin must be in")]:  # fmt: skip
        with pytest.raises(ValueError, match=why) as err:
            parse_precise(bad)
        assert "\n" not in str(err.value) and "--until-precise" in str(err.value)
    res = CliRunner().invoke(main, ["run", "smoke", "--clock", "virtual",
                                    "--until-precise", "ttft_p90=five"])  # fmt: skip
    assert res.exit_code == 2 and "is not a margin" in res.output
    spread = ["run", "smoke", "--until-precise", "ttft_p90=5%", "--workers", "2",
              "--base-url", "http://127.0.0.1:9"]  # fmt: skip
    res = CliRunner().invoke(main, spread)
    assert res.exit_code == 2 and "--until-precise decides when to stop" in res.output


async def test_an_open_loop_stops_at_the_n_the_interval_predicts(tmp_path: Path) -> None:
    target = PrecisionTarget("ttft", 0.9, 0.05)
    run = await precise_run(tmp_path, "{poisson: {rate_per_s: 40}}", target)
    recs = [r for r in read_streams(run) if r.phase == "measure"]  # in the order seen
    got = until_precise(run)
    n = expected_stop([ttft(r) for r in recs], 0.9, 0.05)
    assert n is not None and n < PLANNED  # it stopped early ...
    assert got.reached and got.measured == n and got.targets[0].n == n  # ... at n
    assert got.targets[0].margin <= 0.05 < _margin_before(recs, n)
    # Nothing was sent after the stop: the streams past n were in flight when it came.
    stopped_at = recs[n - 1].t_done_ns
    assert stopped_at is not None
    assert all(r.t_intended_ns <= stopped_at for r in recs)
    assert len(recs) < PLANNED and len(recs) - n <= 8  # max_num_seqs in flight at most
    # The plan was a bound the stop cut short: no stream is reported missing.
    summary = analyze_run(run).summary["run"]
    told = summary["until_precise"]  # as run.json said, its floats cut to 9 digits
    assert (told["measured"], told["targets"][0]["n"]) == (n, n) and told["reached"]
    assert summary["records"]["missing"] is None


def until_precise(run_dir: Path) -> UntilPrecise:
    """run.json's `until_precise`, read through its type."""
    got = read_manifest(run_dir).until_precise
    assert got is not None
    return got


def _margin_before(recs: list[StreamRecord], n: int) -> float:
    """The margin one value earlier: above the goal, or the run would have stopped there."""
    xs = sorted(ttft(r) for r in recs[: n - 1])
    ranks = exact_ranks(n - 1, 0.9)
    if ranks is None:
        return math.inf
    est = float(np.percentile(xs, 90))
    return max(est - xs[ranks[0] - 1], xs[ranks[1] - 1] - est) / est


async def test_a_closed_loop_sends_exactly_n_and_several_targets_all_hold(tmp_path: Path) -> None:
    targets = (PrecisionTarget("ttft", 0.9, 0.05), PrecisionTarget("e2e", 0.5, 0.01))
    run = await precise_run(tmp_path, "{closed: {concurrency: 1}}", *targets)
    recs = [r for r in read_streams(run) if r.phase == "measure"]
    got = until_precise(run)
    e2e = [(r.t_done_ns - r.t_sent_ns) / 1e9 for r in recs]  # type: ignore[operator]
    need = [expected_stop([ttft(r) for r in recs], 0.9, 0.05), expected_stop(e2e, 0.5, 0.01)]
    assert None not in need
    n = max(need)  # type: ignore[type-var]
    assert got.reached and got.measured == n == len(recs)  # one seat: none in flight
    assert [t.n for t in got.targets] == [n, n]


async def test_a_margin_never_reached_runs_the_whole_plan_and_says_so(tmp_path: Path) -> None:
    run = await precise_run(tmp_path, "{poisson: {rate_per_s: 40}}",
                            PrecisionTarget("ttft", 0.9, 0.001))  # fmt: skip
    recs = [r for r in read_streams(run) if r.phase == "measure"]
    got = until_precise(run)
    assert expected_stop([ttft(r) for r in recs], 0.9, 0.001) is None
    assert len(recs) == PLANNED and not got.reached  # never past the plan's bound
    assert got.measured == PLANNED and got.targets[0].margin > 0.001


def test_the_report_states_the_margin_and_the_n_both_ways(tmp_path: Path) -> None:
    path = tmp_path / "precise.yaml"
    path.write_text(SCENARIO.replace("ARRIVAL", "{poisson: {rate_per_s: 40}}"))
    for margin, line in (("5%", "until precise: ttft_p90"), ("0.1%", "!! NOT PRECISE")):
        res = CliRunner().invoke(main, ["run", str(path), "--clock", "virtual", "--no-progress",
                                        "--until-precise", f"ttft_p90={margin}",
                                        "--out", str(tmp_path / margin)])  # fmt: skip
        assert res.exit_code == 0, res.output
        head = next(x for x in res.output.splitlines() if line in x)
        assert f"(goal {float(margin[:-1]):.1f}%)" in head and "at n=" in head


def test_each_capacity_step_stops_when_precise(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["capacity", "capacity_seats", "--over", "concurrency",
                                    "--slo", "ttft_p90=1", "--clock", "virtual", "--requests",
                                    "60", "--min", "1", "--max", "2", "--max-steps", "2",
                                    "--repeats", "1", "--until-precise", "ttft_p90=10%",
                                    "--no-progress", "--out", str(tmp_path)])  # fmt: skip
    assert res.exit_code == 0, res.output
    steps = sorted(tmp_path.glob("*/steps/*"))
    assert len(steps) == 2
    for step in steps:
        got = until_precise(step)
        recs = [r for r in read_streams(step) if r.phase == "measure"]
        n = expected_stop([ttft(r) for r in recs], 0.9, 0.10)
        assert got.reached and got.targets[0].n == n
        assert n is not None and n <= len(recs) <= n + 1 < 60  # at most one more seat in flight
