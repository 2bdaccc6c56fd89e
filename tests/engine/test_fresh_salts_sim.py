"""Item 14 of issue #10: a salted prompt is cold on a long-lived server unless the user asks to
replay, and a replay that came back warm says so. One sim server serves every run here, as a
real server would between runs."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import orjson

from loadgen.report.cmd import write_report
from loadgen.sim.server import start_sim_server

from support.sim import SMALL, run_against, small_sim_config


def _summary(run_dir: Path) -> tuple[dict, str]:
    text = write_report(run_dir)
    return orjson.loads((run_dir / "summary.json").read_bytes()), text


def _warm_streams(summary: dict) -> list[str]:
    return sorted(
        s["id"]
        for s in summary["streams"]
        if s["phase"] == "measure" and "cache_warm" in s["evidence"]
    )


async def test_same_seed_twice_on_one_server_is_warned_warm(tmp_path: Path):
    async with start_sim_server(small_sim_config()) as sim:
        first = await run_against(sim, "whale_c4", tmp_path / "a", seed=7)
        second = await run_against(sim, "whale_c4", tmp_path / "b", seed=7)
    cold, cold_text = _summary(first)
    warm, warm_text = _summary(second)
    assert _warm_streams(cold) == [] and "WARM CACHE" not in cold_text
    assert len(_warm_streams(warm)) == 4
    whale = next(s for s in warm["streams"] if s["group"] == "whale")
    evidence = whale["evidence"]["cache_warm"]
    assert evidence["source"] == "usage" and evidence["cached_tokens"] > 0.9 * 6000
    assert "!! WARM CACHE: 4 of 4 measured streams meant to be cold (salted)" in warm_text


async def _cli_run(url: str, out: Path, *extra: str) -> Path:
    sets = [a for s in SMALL for a in ("--set", s)]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "loadgen", "run", "whale_c4", "--base-url", url, "--out", str(out),
        "--no-progress", *sets, *extra,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, stderr = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0, stderr.decode()[-2000:]
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return run_dir


async def test_default_runs_are_cold_every_time_and_replay_reuses_the_seed(tmp_path: Path):
    async with start_sim_server(small_sim_config()) as sim:
        runs = [await _cli_run(sim.url, tmp_path / name) for name in ("a", "b")]
        replay = await _cli_run(sim.url, tmp_path / "c", "--replay", str(runs[0]))
    manifests = [orjson.loads((d / "run.json").read_bytes()) for d in [*runs, replay]]
    assert [m["seed_source"] for m in manifests[:2]] == ["fresh", "fresh"]
    assert manifests[0]["seed"] != manifests[1]["seed"]
    for d in runs:
        summary, text = _summary(d)
        assert _warm_streams(summary) == [] and "WARM CACHE" not in text
        assert all(s["cached_tokens"] == 0 for s in summary["streams"] if s["phase"] == "measure")
    assert manifests[2]["seed"] == manifests[0]["seed"]
    assert manifests[2]["seed_source"] == f"replay:{runs[0]}"
    summary, text = _summary(replay)
    assert len(_warm_streams(summary)) == 4 and "!! WARM CACHE" in text
