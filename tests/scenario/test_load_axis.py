"""A scenario's load as one knob (scenario/load_axis.py) and `loadgen run --concurrency/--rate`."""

from __future__ import annotations

import math
from pathlib import Path

import orjson
import pytest

from loadgen.scenario.load import load_scenario
from loadgen.scenario.load_axis import (
    LoadAxis,
    load_problem,
    load_sweep,
    parse_load_values,
    with_load,
)
from loadgen.scenario.model import Closed, Gamma, Poisson

from support.cli import assert_one_line_error, loadgen


def test_load_values_parse_and_refuse_with_the_flag_named() -> None:
    assert parse_load_values("1, 2,4", "concurrency") == (1, 2, 4)
    assert parse_load_values("0.5,2,inf", "rate") == (0.5, 2.0, math.inf)
    for text, over, says in [
        ("1,1.5", "concurrency", "'1.5' (expected whole numbers >= 1)"),
        ("0", "concurrency", "'0' (expected whole numbers >= 1)"),
        ("inf", "concurrency", "'inf' (expected whole numbers >= 1)"),
        ("-1", "rate", "'-1' (expected requests/s > 0, or inf)"),
        ("x", "rate", "'x' is not a number"),
        ("2,2", "rate", "a value is given twice"),
        (",", "rate", "no value"),
    ]:
        with pytest.raises(ValueError) as err:
            parse_load_values(text, over)
        assert str(err.value).startswith(f"--{over} {text!r}: ")
        assert says in str(err.value)


def test_concurrency_makes_a_closed_loop_sized_per_seat() -> None:
    s = load_scenario("smoke")  # together, 4 streams in one pass
    assert with_load(s, LoadAxis("concurrency"), 2).arrival == Closed(2, 32)
    assert with_load(s, LoadAxis("concurrency"), 16).arrival == Closed(16, 64)
    assert with_load(s, LoadAxis("concurrency", requests=5), 16).arrival == Closed(16, 5)
    # Only the arrival changes: the same groups, prompts and output lengths in every arm.
    assert with_load(s, LoadAxis("concurrency"), 2).groups == s.groups


def test_rate_makes_poisson_keeps_a_gamma_and_inf_sends_all_at_once() -> None:
    s = load_scenario("smoke")
    # A counted rate is sent at its label (bench's schedule: the last of N at N / rate).
    assert with_load(s, LoadAxis("rate"), 2.0).arrival == Poisson(2.0, 32, exact_span=True)
    assert with_load(s, LoadAxis("rate"), 10.0).arrival == Poisson(10.0, 100, exact_span=True)
    assert with_load(s, LoadAxis("rate"), math.inf).arrival == Closed(32, 32)
    gamma = load_scenario("smoke", ["arrival={gamma: {rate_per_s: 1, burstiness: 0.5, count: 9}}"])
    assert with_load(gamma, LoadAxis("rate"), 4.0).arrival == Gamma(4.0, 0.5, 9, exact_span=True)
    # A duration bounds the arrivals instead: nothing to scale them to.
    timed = load_scenario("smoke", ["arrival={poisson: {rate_per_s: 1, duration_s: 5}}"])
    assert with_load(timed, LoadAxis("rate"), 2.0).arrival == Poisson(2.0, None, 5.0)


def test_a_seat_cap_stays_on_every_rate_and_is_the_seats_at_inf() -> None:
    capped = load_scenario("smoke", ["arrival={poisson: {rate_per_s: 1, concurrency: 3}}"])
    exact = {"exact_span": True}
    assert with_load(capped, LoadAxis("rate"), 2.0).arrival == Poisson(2.0, 32, concurrency=3,
                                                                       **exact)  # fmt: skip
    assert with_load(capped, LoadAxis("rate"), math.inf).arrival == Closed(3, 32)
    s = load_scenario("smoke")
    assert with_load(s, LoadAxis("rate", cap=5), 2.0).arrival == Poisson(2.0, 32, concurrency=5,
                                                                        **exact)  # fmt: skip
    ramp_set = "ramp: {strategy: linear, start_rate_per_s: 1, end_rate_per_s: 4}"
    ramp = load_scenario("smoke", [f"arrival={{gamma: {{burstiness: 2, count: 9, {ramp_set}}}}}"])
    assert with_load(ramp, LoadAxis("rate"), 4.0).arrival == Gamma(4.0, 2.0, 9, **exact)


def test_a_group_count_is_the_load_under_together_only() -> None:
    s = load_scenario("whale_c4")
    axis = LoadAxis("concurrency", group="minnows")
    assert load_problem(s, axis) is None
    loaded = with_load(s, axis, 7)
    assert [(g.name, g.count) for g in loaded.groups] == [("whale", 1), ("minnows", 7)]
    assert loaded.arrival == s.arrival
    closed = load_scenario(
        "whale_c4", ["arrival={closed: {concurrency: 2}}", "groups.minnows.start=0"]
    )
    assert "count is its weight" in (load_problem(closed, axis) or "")
    assert "no group 'sharks'" in (load_problem(s, LoadAxis("concurrency", group="sharks")) or "")
    assert "--over concurrency" in (load_problem(s, LoadAxis("rate", group="minnows")) or "")


def test_load_problems_fire_on_sweeps_traces_and_sessions_and_not_on_a_plain_scenario() -> None:
    assert load_problem(load_scenario("smoke"), LoadAxis("rate")) is None
    started = load_problem(load_scenario("whale_c4"), LoadAxis("concurrency"))
    assert started is not None and "groups.minnows.start: 0.5 s needs a together" in started
    # The fix names options that exist where the axis comes from: run and tune have no --group.
    assert "--set groups.minnows.start=0" in started and "loadgen capacity --group" in started
    swept = load_problem(load_scenario("ladder"), LoadAxis("concurrency"))
    assert swept is not None and "already sweeps groups.streams.count" in swept
    trace = load_problem(load_scenario("azure_code"), LoadAxis("rate"))
    assert trace is not None and "a trace sets its own arrivals" in trace
    sessions = load_problem(load_scenario("agent_sessions"), LoadAxis("concurrency"))
    assert sessions is not None and "loadgen capacity --group NAME" in sessions


def test_a_load_sweep_is_one_client_side_arm_per_value_on_one_boot() -> None:
    sweep = load_sweep(load_scenario("smoke"), LoadAxis("rate"), (1.0, math.inf))
    assert [a.name for a in sweep.arms] == ["rate=1", "rate=inf"]
    assert [a.settings for a in sweep.arms] == [{"rate": 1.0}, {"rate": "inf"}]
    assert all(not a.flags for a in sweep.arms) and sweep.boots_per_arm == 1


def test_run_concurrency_writes_one_arm_per_value(tmp_path: Path) -> None:
    proc = loadgen(
        "run", "smoke", "--clock", "virtual", "--seed", "7", "--no-progress", "--out", tmp_path,
        "--concurrency", "1,4", "--requests", "8",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = tmp_path.iterdir()
    arms = sorted(p.name for p in (run_dir / "arms").iterdir())
    assert arms == ["concurrency=1", "concurrency=4"]
    for name, seats in [("concurrency=1", 1), ("concurrency=4", 4)]:
        manifest = orjson.loads((run_dir / "arms" / name / "run.json").read_bytes())
        assert manifest["scenario"]["arrival"] == {
            "kind": "closed", "concurrency": seats, "count": 8, "duration_s": None,
        }  # fmt: skip
        summary = orjson.loads((run_dir / "arms" / name / "summary.json").read_bytes())
        assert summary["benchmark"]["total"]["requests_ok"] == 8
    assert "per arm: concurrency = 1, 4" in proc.stdout


def test_run_load_flags_refuse_in_one_line(tmp_path: Path) -> None:
    both = loadgen("run", "smoke", "--clock", "virtual", "--concurrency", "1", "--rate", "1")
    assert both.returncode == 2 and "not both" in both.stderr
    swept = loadgen("run", "ladder", "--clock", "virtual", "--out", tmp_path, "--rate", "1,2")
    assert "already sweeps" in assert_one_line_error(swept)
    alone = loadgen("run", "smoke", "--clock", "virtual", "--requests", "3")
    assert alone.returncode == 2 and "--requests sizes the arms" in alone.stderr
