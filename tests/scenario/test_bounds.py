"""Bounds, round 2 (issue #20): validate and the flags refuse what a run cannot do, one line
naming the field and its limit (scenario/limits.py's table), and let through what it can."""

from __future__ import annotations

import resource
from pathlib import Path

import pytest

from loadgen.analysis.slo import SloItem, parse_slo
from loadgen.scenario.limits import (
    MAX_ARMS,
    MAX_PROMPT_TOKENS,
    MAX_SECONDS,
    MAX_STREAMS,
    MAX_TIME_SCALE,
    arms_problem,
    client_problems,
    worker_limit,
)
from loadgen.scenario.load import ScenarioError, load_scenario
from loadgen.simoptions import MAX_SIM_BLOCKS

from support.cli import assert_one_line_error, loadgen
from support.paths import DATA, REPO

SCENARIOS = REPO / "scenarios"
SESSIONS = SCENARIOS / "agent_sessions.yaml"
SMOKE = SCENARIOS / "smoke.yaml"
MEMORY_CAP = 1 << 30
S = "groups.agents.session"


def _refused(path: Path, *sets: str) -> list[str]:
    with pytest.raises(ScenarioError) as info:
        load_scenario(path, sets)
    return info.value.errors


@pytest.mark.parametrize(
    ("override", "words"),
    [
        (f"{S}.turns=1000000000", f"{S}.turns: got 1000000000 (expected an integer >= 1 and "
         f"<= {MAX_STREAMS})"),
        (f"{S}.system_tokens=1000000000", f"{S}.system_tokens: got 1000000000 (expected an "
         f"integer >= 16 and <= {MAX_PROMPT_TOKENS})"),
        (f"{S}.user_tokens=1000000000", f"{S}.user_tokens: got 1000000000 (expected an "
         f"integer >= 16 and <= {MAX_PROMPT_TOKENS})"),
        (f"{S}.think_s=1000000000", f"{S}.think_s: got 1000000000 (expected a number >= 0 "
         f"and <= {MAX_SECONDS:g})"),
        (f"{S}.think_s=.inf", f"{S}.think_s: got inf (expected a number >= 0 and <= "),
        ("groups.agents.start=.nan", "groups.agents.start: got nan (expected a number >= 0"),
        ("seed=1180591620717411303424", "seed: got 1180591620717411303424 (expected an "
         "integer of at most 63 bits)"),
        ("arrival={staggered: {interval_s: 1000000000}}",
         "arrival.staggered.interval_s: got 1000000000 (expected a number > 0 and <= 604800)"),
    ],
)  # fmt: skip
def test_a_field_beyond_its_bound_is_refused_naming_field_and_limit(
    override: str, words: str
) -> None:
    errors = _refused(SESSIONS, override)
    assert len(errors) == 1 and words in errors[0], errors


def test_fields_within_their_bounds_pass() -> None:
    # 5000 turns of 4 sessions is 20,000 requests: inside the plan's limit, so not refused.
    ok = [f"{S}.turns=5000", f"{S}.system_tokens=70000", f"{S}.think_s=60"]
    load_scenario(SESSIONS, ok)
    load_scenario(SESSIONS, ["seed=9223372036854775807"])


def test_a_sessions_turns_count_as_requests_of_the_plan() -> None:
    # 4 sessions x 3,000,000 turns = 12,000,000 requests: each turn is one request.
    (line,) = _refused(SESSIONS, f"{S}.turns=3000000", f"{S}.think_s=0.0001", f"{S}.think=fixed")
    assert f"plan: 12000000 requests (count x repetitions x arms, warmup included) exceed the " \
        f"limit of {MAX_STREAMS}" in line  # fmt: skip


def test_a_plan_scheduled_over_more_than_a_week_is_refused() -> None:
    # 7 waits of 100,000 s between 8 turns: 700,000 s > 604,800 s, though each wait is legal.
    (line,) = _refused(SESSIONS, f"{S}.think_s=100000", f"{S}.think=fixed")
    assert line.endswith(
        f"plan: one rep is scheduled over 7e+05 s, beyond the limit of {MAX_SECONDS:.0f} s (a "
        "week; expected shorter waits, a smaller time_scale or a faster rate)"
    )
    load_scenario(SESSIONS, [f"{S}.think_s=80000"])  # 560,000 s: inside


def test_a_poisson_loop_too_slow_for_its_count_is_refused() -> None:
    slow = "arrival={poisson: {rate_per_s: 0.0000001, count: 10}}"
    (line,) = _refused(SMOKE, slow)
    assert "plan: one rep is scheduled over 1e+08 s" in line
    load_scenario(SMOKE, ["arrival={poisson: {rate_per_s: 0.001, count: 10}}"])


def test_a_trace_time_scale_is_bounded(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_bytes((DATA / "mooncake_small.jsonl").read_bytes())
    head = "name: t\nseed: 1\ngroups:\n  - name: a\n    prompt: {shape: prose}\n"
    scenario = tmp_path / "s.yaml"
    scenario.write_text(head + "arrival: {trace: {path: t.jsonl, time_scale: 1000000000}}\n")
    assert f"{scenario}:6: arrival.trace.time_scale: got 1000000000 (expected a number > 0 " \
        f"and <= {MAX_TIME_SCALE:g})" in _refused(scenario)  # fmt: skip
    scenario.write_text(head + "arrival: {trace: {path: t.jsonl, time_scale: 1000}}\n")
    assert load_scenario(scenario).arrival.time_scale == 1000.0


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def test_a_million_arm_sweep_is_refused_before_any_arm_is_built(tmp_path: Path) -> None:
    axes = ["max_num_seqs", "max_num_batched_tokens", "block_size", "num_gpu_blocks", "speed",
            "num_speculative_tokens"]  # fmt: skip
    text = (
        SMOKE.read_text()
        + "sweep:\n"
        + "".join(f"  {axis}: [{', '.join(str(16 + i) for i in range(10))}]\n" for axis in axes)
    )
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(text)
    # Under a 1 GiB address-space cap and a 60 s limit: it once held 263 MB and did not end.
    proc = loadgen("validate", sweep, timeout_s=60, preexec_fn=_cap_memory)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip() == (
        f"{sweep}:{text.count(chr(10)) - 5}: sweep: 10 x 10 x 10 x 10 x 10 x 10 = 1000000 arms "
        f"exceed the limit of {MAX_ARMS} (expected fewer axis values)"
    )


def test_arms_are_counted_against_the_limit() -> None:
    assert arms_problem([10, 10, 10]) is None  # 1000 arms: at the limit, allowed
    assert arms_problem([10, 10, 11]) == (
        f"10 x 10 x 11 = 1100 arms exceed the limit of {MAX_ARMS} (expected fewer axis values)"
    )


def test_workers_and_ray_flags_are_bounded() -> None:
    assert worker_limit(ray=False, cores=2) == 8
    assert worker_limit(ray=False, cores=1000) == worker_limit(ray=True) == 256
    local = worker_limit(ray=False)
    assert client_problems(local, None) == []
    assert client_problems(None, "auto") == []
    assert client_problems(local + 1, None) == [
        f"--workers {local + 1}: more than the limit of {local} (4 per core on this host; "
        f"expected at most {local})"
    ]
    assert client_problems(257, "auto") == [
        "--workers 257: more than the limit of 256 (Ray actors; expected at most 256)"
    ]
    assert client_problems(None, " ") == [
        "--ray '': no address (expected auto, HOST:PORT or local)"
    ]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--workers", "100000"], "--workers 100000: more than the limit of"),
        (["--ray", ""], "--ray '': no address"),
        (["--seed", str(1 << 70)], f"{1 << 70} is not in the range"),
        (["--slo", "ttft=nan"], "--slo 'ttft=nan': ttft must be > 0 and <= 604800"),
    ],
)
def test_run_refuses_unbounded_flags_in_one_line(
    tmp_path: Path, args: list[str], words: str
) -> None:
    proc = loadgen("run", "smoke", "--no-progress", "--out", tmp_path, *args, timeout_s=60)
    assert words in assert_one_line_error(proc)
    assert not any(tmp_path.iterdir())  # nothing was started


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ttft=nan", "--slo 'ttft=nan': ttft must be > 0 and <= 604800 s"),
        ("ttft=inf", "--slo 'ttft=inf': ttft must be > 0 and <= 604800 s"),
        ("e2e=1e999", "--slo 'e2e=1e999': e2e must be > 0 and <= 604800 s"),
        ("tpot_p99=1e999", "--slo 'tpot_p99=1e999': tpot_p99 must be > 0 and <= 604800000 ms"),
        ("ttft=1,ttft=2", "--slo 'ttft=1,ttft=2': ttft given twice (expected each once)"),
    ],
)
def test_slo_flags_must_be_finite_and_given_once(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_slo(text)
    assert str(info.value) == message


def test_finite_slos_pass() -> None:
    assert parse_slo("ttft=2,tpot=50,e2e=604800") == (
        SloItem("ttft", 2.0, 0.9), SloItem("tpot", 50.0, 0.9), SloItem("e2e", 604800.0, 0.9),
    )  # fmt: skip


def test_a_bad_limit_variable_is_one_line_not_an_import_crash() -> None:
    env = {"LOADGEN_MAX_STREAMS": "abc"}
    assert loadgen("--help", env=env, timeout_s=60).returncode == 0
    proc = loadgen("validate", SMOKE, env=env, timeout_s=60)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip() == (
        f"{SMOKE}: LOADGEN_MAX_STREAMS: got 'abc' (expected a whole number >= 1; unset it for "
        "10000000)"
    )
    good = loadgen("validate", SMOKE, env={"LOADGEN_MAX_STREAMS": "50"}, timeout_s=60)
    assert good.returncode == 0, good.stderr


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("sim.num_gpu_blocks=1000000000000", "sim.num_gpu_blocks: got 1000000000000 (expected "
         f"an integer >= 1 and <= {MAX_SIM_BLOCKS})"),
        ("sim.speed=0.000000001", "sim.speed: got 1e-09 (expected a number >= 0.001 and <= "
         "1000)"),
    ],
)  # fmt: skip
def test_the_sims_pool_and_time_factor_are_bounded(override: str, words: str) -> None:
    # 10^12 blocks was a MemoryError; speed 1e-9 stretched a smoke run past any end.
    (line,) = _refused(SMOKE, override)
    assert words in line
    load_scenario(SMOKE, [f"sim.num_gpu_blocks={MAX_SIM_BLOCKS}", "sim.speed=0.001"])


def test_request_counts_and_sizes_are_bounded() -> None:
    proc = loadgen("request", "--base-url", "http://127.0.0.1:9", "-n", "1000000000",
                   timeout_s=60)  # fmt: skip
    assert f"1000000000 is not in the range 1<=x<={MAX_STREAMS}" in assert_one_line_error(proc)
    proc = loadgen("request", "--base-url", "http://127.0.0.1:9", "--prompt-tokens",
                   str(MAX_PROMPT_TOKENS + 1), timeout_s=60)  # fmt: skip
    assert f"is not in the range 1<=x<={MAX_PROMPT_TOKENS}" in assert_one_line_error(proc)
