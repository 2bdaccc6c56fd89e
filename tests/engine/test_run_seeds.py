"""Item 14 of issue #10, without a server: where salts come from, and how a seed is replayed."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import orjson
import pytest
from click.testing import CliRunner

from loadgen.cli import main
from loadgen.engine import run as engine_run
from loadgen.engine.seeds import recorded_seed, resolve_run_seed
from loadgen.records import read_streams
from loadgen.scenario.load import load_scenario
from loadgen.scenario.plan import plan

from support.pacedserver import PacedConfig, ThreadedPacedServer
from support.virtual import run_virtual


def _salts(name: str, group: str, seed: int) -> list[str]:
    return [r.prompt.salt for r in plan(load_scenario(name), run_seed=seed).requests()
            if r.group == group]  # fmt: skip


def test_two_scenarios_with_one_seed_share_no_salt():
    # whale_c4 and whale_c4_cached have the same scenario seed and the same salted minnows.
    plain, cached = _salts("whale_c4", "minnows", 74), _salts("whale_c4_cached", "minnows", 74)
    assert len(plain) == len(cached) == 3
    assert not set(plain) & set(cached)


def test_run_seed_is_fresh_by_default_and_replayed_exactly(tmp_path: Path):
    a, b = resolve_run_seed(None, None), resolve_run_seed(None, None)
    assert (a.source, b.source) == ("fresh", "fresh") and a.value != b.value
    assert resolve_run_seed(5, None).value == 5
    (tmp_path / "run.json").write_bytes(orjson.dumps({"seed": a.value}))
    replay = resolve_run_seed(None, tmp_path)
    assert (replay.value, replay.source) == (a.value, f"replay:{tmp_path}")
    with pytest.raises(ValueError, match="pass one of them"):
        resolve_run_seed(5, tmp_path)
    with pytest.raises(ValueError, match=r"cannot read .*run.json"):
        recorded_seed(tmp_path / "nowhere")


def _request_prompts(tmp_path: Path, name: str, *seed: str) -> tuple[list[str], dict]:
    out = tmp_path / name
    with ThreadedPacedServer(PacedConfig(ttft_s=0.001, gap_s=0.001)) as srv:
        args = ["request", "--base-url", srv.url + "/v1", "--prompt-tokens", "30"]
        result = CliRunner().invoke(main, [*args, "-n", "2", "--out", str(out), *seed])
        assert result.exit_code == 0, result.output
    served = sorted(srv.served, key=lambda s: s.request_id)
    prompts = [s.body["prompt"] for s in served]
    return prompts, orjson.loads((out / "run.json").read_bytes())


def test_request_salts_are_fresh_per_invocation_unless_seeded(tmp_path: Path):
    first, m1 = _request_prompts(tmp_path, "a")
    second, m2 = _request_prompts(tmp_path, "b")
    assert len(set(first)) == 2 and not set(first) & set(second)
    assert m1["seed_source"] == "fresh" and m1["seed"] != m2["seed"]
    again, m3 = _request_prompts(tmp_path, "c", "--seed", str(m1["seed"]))
    assert again == first and m3["seed_source"] == "user"
    # --replay, as `loadgen run` takes it: the recorded seed, so the same salts.
    replayed, m4 = _request_prompts(tmp_path, "d", "--replay", str(tmp_path / "a"))
    assert replayed == first and m4["seed_source"] == f"replay:{tmp_path / 'a'}"


def test_a_prompt_shorter_than_the_salt_tag_keeps_one_salt_word(tmp_path: Path):
    with ThreadedPacedServer(PacedConfig(ttft_s=0.001, gap_s=0.001)) as srv:
        args = ["request", "--base-url", srv.url + "/v1", "--prompt-tokens", "1", "-n", "2"]
        result = CliRunner().invoke(main, [*args, "--max-tokens", "2"])
        assert result.exit_code == 0, result.output
    prompts = [s.body["prompt"] for s in srv.served]
    assert len(set(prompts)) == 2 and all(len(p.split()) == 1 for p in prompts)
    assert all(len(s.body["cache_salt"].split("-")) == 4 for s in srv.served)


def test_request_refuses_two_seeds_in_one_line(tmp_path: Path):
    args = ["request", "--base-url", "http://127.0.0.1:9", "--seed", "1", "--replay", tmp_path]
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 2 and "--seed and --replay both name a seed" in result.output


async def test_two_runs_started_in_one_second_never_share_a_directory(tmp_path: Path):
    # The directory name has a one-second stamp; records append, so a shared directory would
    # read back as one run of both runs' streams.
    with mock.patch.object(engine_run, "run_dir_name", lambda scenario, now: "same-second"):
        first = await run_virtual("smoke", [], tmp_path, seed=1)
        second = await run_virtual("smoke", [], tmp_path, seed=1)
    assert (first.run_dir.name, second.run_dir.name) == ("same-second", "same-second-2")
    planned = len(list(plan(load_scenario("smoke"), run_seed=1).requests()))
    assert len(read_streams(first.run_dir)) == len(read_streams(second.run_dir)) == planned
