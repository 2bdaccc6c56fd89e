"""Upper bounds before work starts (issue #10 item 3): validate refuses what cannot run."""

from __future__ import annotations

import resource
from pathlib import Path

import pytest

from loadgen.scenario import limits
from loadgen.scenario.limits import (
    MAX_PROMPT_TOKENS,
    MAX_STREAMS,
    MAX_YAML_NODES,
    requests_bound,
)
from loadgen.scenario.load import load_scenario
from loadgen.scenario.plan import plan
from loadgen.server.launcher import launch_sync
from loadgen.server.sim import SimProfile

from support.cli import assert_one_line_error, loadgen
from support.paths import REPO

SMOKE = REPO / "scenarios" / "smoke.yaml"
# validate must answer within this memory, whatever the file asks for (address-space cap).
MEMORY_CAP = 1 << 30


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def _validate_error(*args: str | Path) -> str:
    """validate's stderr: one line per problem, each naming the file; no traceback."""
    proc = loadgen("validate", *args, timeout_s=60, preexec_fn=_cap_memory)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    return proc.stderr


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("groups.short.count=1000000000", f"exceed the limit of {MAX_STREAMS}"),
        ("repetitions=1000000000", f"exceed the limit of {MAX_STREAMS}"),
        ("groups.long.prompt.tokens=1000000000", f"exceeds the limit of {MAX_PROMPT_TOKENS}"),
    ],
)
def test_validate_refuses_plans_beyond_the_stated_limits(override: str, words: str) -> None:
    line = _validate_error(SMOKE, "--set", override)
    assert all(x.startswith(f"{SMOKE}: ") for x in line.splitlines())
    assert words in line
    assert "LOADGEN_MAX_" in line  # says how to allow more


def test_validate_refuses_a_prompt_beyond_the_sims_window() -> None:
    line = _validate_error(SMOKE, "--set", "groups.long.prompt.tokens=2000")
    assert (
        f"{SMOKE}: groups.long: prompt 2000 + max_tokens 16 = 2016 tokens exceeds the sim's "
        "max_model_len 1024" in line
    )


def test_a_billion_laughs_file_is_refused_at_its_line(tmp_path: Path) -> None:
    levels = ["a: &a [" + ", ".join(['"lol"'] * 9) + "]"]
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        levels.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    bomb = tmp_path / "lol.yaml"
    bomb.write_text(
        "name: lol\nseed: 1\napi: chat\n" + "\n".join(levels) + "\n"
        "chat_template_kwargs: {x: *i}\n"
        "groups: [{name: g, count: 1, prompt: {tokens: 64}, max_tokens: 4}]\n"
    )
    line = _validate_error(bomb)
    assert line.startswith(f"{bomb}:")
    assert f"aliases expand to more than {MAX_YAML_NODES} values" in line


def test_run_refuses_a_prompt_beyond_an_external_servers_window(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    text = SMOKE.read_text().replace("tokens: 256", "tokens: 3000")
    scenario.write_text(text[: text.index("sim:")])  # no sim block: the server's window rules
    flags = ["--max-model-len", "2048"]
    with launch_sync(SimProfile(), flags=flags, log_dir=tmp_path / "sim", served_name="m") as sim:
        proc = loadgen("run", scenario, "--base-url", sim.url, "--out", tmp_path / "runs")
    line = assert_one_line_error(proc)
    assert (
        f"groups.long: prompt 3000 + max_tokens 16 = 3016 tokens exceeds {sim.url}'s "
        "max_model_len 2048" in line
    )
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_billion_laughs_override_is_refused() -> None:
    levels = ["a: &a [" + ", ".join(["x"] * 9) + "]"]
    for prev, name in zip("abcde", "bcdef", strict=True):
        levels.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    err = _validate_error(SMOKE, "--set", "sim.faults={" + ", ".join(levels) + "}")
    assert f"aliases expand to more than {MAX_YAML_NODES} values" in err


@pytest.mark.parametrize("name", ["agent_tools", "agent_sessions", "politeness", "smoke"])
def test_the_bound_checked_before_planning_holds_every_request_the_plan_sends(name: str) -> None:
    """requests_bound caps the plan before it is built, so it may not undercount it: a tool's
    turn sends two requests (agent_tools once counted one)."""
    scenario = load_scenario(name, [])
    built = plan(scenario)
    arms = scenario.sweep.arms if scenario.sweep else ()
    for arm, s in zip(built.arms, [a.scenario for a in arms] or [scenario], strict=True):
        assert requests_bound(s) == len(arm.warmup) + arm.planned_streams


def million(monkeypatch: pytest.MonkeyPatch, available_gib: float) -> list[str]:
    """size_problems of smoke.yaml at a million requests on a host with this memory free."""
    monkeypatch.setattr(limits, "available_memory", lambda: None)
    arm = load_scenario(SMOKE, ["groups.short.count=999999", "groups.long.count=1"])
    assert requests_bound(arm) == 1_000_000
    monkeypatch.setattr(limits, "available_memory", lambda: int(available_gib * (1 << 30)))
    return limits.size_problems([arm])


def test_a_million_request_plan_runs_where_memory_holds_it(monkeypatch) -> None:
    # 100,000 requests was the limit whatever the host; 24 KiB each is 22.9 GiB.
    monkeypatch.delenv("LOADGEN_MAX_STREAMS", raising=False)
    assert million(monkeypatch, 32) == []
    (line,) = million(monkeypatch, 16)
    assert line == (
        "plan: 1000000 requests need about 22.9 GiB to run and analyse (24 KiB each), more "
        "than the 16.0 GiB this host has available (expected at most 699050; set "
        "LOADGEN_MAX_STREAMS=1000000 to run it anyway)"
    )
    monkeypatch.setenv("LOADGEN_MAX_STREAMS", "1000000")  # the user's own limit rules
    assert million(monkeypatch, 16) == []
