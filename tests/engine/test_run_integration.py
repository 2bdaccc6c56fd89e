"""`loadgen run` end to end against the built-in sim over loopback, checked against the sim's
own ground truth (what the engine really did), not against loadgen's numbers."""

import dataclasses
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from loadgen.records import read_metrics, read_streams
from loadgen.sim.faults import FaultConfig
from loadgen.sim.server import ground_truth_rows, start_sim_server

from support.cli import loadgen
from support.sim import run_against, small_sim_config


def measured_truth(sim) -> dict[str, dict]:
    """Ground-truth rows of the measured streams, keyed by the client's stream id."""
    rows = ground_truth_rows(sim.state)
    return {r["client_request_id"]: r for r in rows if r["client_request_id"]}


async def test_salted_whale_misses_and_primed_whale_hits_the_cache(tmp_path: Path):
    async with start_sim_server(small_sim_config()) as sim:
        cold_dir = await run_against(sim, "whale_c4", tmp_path / "cold")
        cold = measured_truth(sim)
    async with start_sim_server(small_sim_config()) as sim:
        warm_dir = await run_against(sim, "whale_c4_cached", tmp_path / "warm")
        warm = measured_truth(sim)
    cold_whale = next(r for r in read_streams(cold_dir) if r.group == "whale")
    warm_whale = next(
        r for r in read_streams(warm_dir) if r.group == "whale" and r.phase == "measure"
    )
    phases = {r.id.rsplit("-", 1)[-1]: r.phase for r in read_streams(warm_dir) if "-" in r.id}
    assert phases == {"prime": "prime", "probe": "probe", "repeat": "repeat"}
    assert cold[cold_whale.id]["num_cached_tokens"] == 0
    assert warm[warm_whale.id]["num_cached_tokens"] > 0.9 * 6000
    check = orjson.loads((warm_dir / "run.json").read_bytes())["cache_checks"][0]
    assert check["warm"] is True and check["hits_delta"] > 0
    assert check["block_size"] == 16 and check["block_size_source"] == "metrics"
    assert (check["verdict"], check["decided_by"], check["answers_match"]) == (
        "healthy", "counters", True
    )  # fmt: skip


async def test_a_primed_group_whose_warm_answer_differs_is_a_cache_correctness_failure(
    tmp_path: Path,
):
    wrong = dataclasses.replace(small_sim_config(), faults=FaultConfig(warm_mismatch=1.0))
    async with start_sim_server(wrong) as sim:
        run_dir = await run_against(sim, "whale_c4_cached", tmp_path)
    check = orjson.loads((run_dir / "run.json").read_bytes())["cache_checks"][0]
    assert (check["warm"], check["verdict"], check["answers_match"]) == (True, "mismatch", False)
    assert "CACHE CORRECTNESS FAILURE" in check["reason"]


async def test_token_counts_and_ttft_agree_with_ground_truth(tmp_path: Path):
    async with start_sim_server(small_sim_config()) as sim:
        run_dir = await run_against(sim, "whale_c4", tmp_path)
        truth = measured_truth(sim)
    records = read_streams(run_dir)
    assert len(records) == 4
    # The wall clock is written like the virtual one, not left for readers to guess.
    assert orjson.loads((run_dir / "run.json").read_bytes())["clock"] == "wall"
    for rec in records:
        row = truth[rec.id]
        assert rec.status == "ok"
        assert rec.completion_tokens == row["completion_tokens"] == 32
        assert rec.prompt_tokens == row["num_prompt_tokens"] == rec.requested_prompt_tokens
        assert rec.token_source == "usage_continuous"
        # Engine-side first token (perf_counter ns) vs the client's receipt of it.
        client_first = (
            rec.t_first_ns + orjson.loads((run_dir / "run.json").read_bytes())["run_start_perf_ns"]
        )
        # The client stamps a chunk after the engine made it; how long after is loopback
        # delivery on a possibly busy machine (make test-busy runs this beside a CPU hog), so
        # the bound is loose. Exact timing is the virtual clock's job (test_verdicts_sim.py).
        assert 0 <= client_first - row["first_token_ns"] < 500_000_000
    assert read_metrics(run_dir), "the poller wrote no samples"


async def test_same_seed_sends_byte_identical_prompts(tmp_path: Path, monkeypatch):
    from loadgen.client.openai import OpenAIClient

    sent: list[list[tuple[str, str]]] = [[], []]
    original = OpenAIClient.stream
    which = {"run": 0}

    async def recording(self, req):
        sent[which["run"]].append((req.id, req.prompt))
        return await original(self, req)

    monkeypatch.setattr(OpenAIClient, "stream", recording)
    for i in range(2):
        which["run"] = i
        async with start_sim_server(small_sim_config()) as sim:
            await run_against(sim, "whale_c4", tmp_path / str(i), seed=7)
    assert sorted(sent[0]) == sorted(sent[1])
    assert len(sent[0]) == 4


def test_cli_run_whale_c4_prints_the_whale_table(tmp_path: Path):
    """The main job as a user runs it: the sim booted in its own process, the table printed."""
    proc = subprocess.run(
        [sys.executable, "-m", "loadgen", "run", "whale_c4", "--out", str(tmp_path),
         "--no-progress"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    (run_dir,) = tmp_path.iterdir()
    records = [r for r in read_streams(run_dir) if r.phase == "measure"]
    assert sorted(r.group for r in records) == ["minnows"] * 3 + ["whale"]
    assert all(r.completion_tokens == 256 and r.status == "ok" for r in records)
    assert "whale TTFT" in proc.stdout
    for name in ("summary.json", "report.txt", "report.html", "run.json", "metrics.jsonl"):
        assert (run_dir / name).is_file(), name


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_closed_loop_with_a_duration_stops_sending_at_it_on_the_wall_clock(
    tmp_path: Path, workers: str
) -> None:
    # Before: the wall clock sent every planned request past the duration (a 1 s duration
    # without a count plans 10,000); the virtual clock stopped at 1 s. 2 seats of ~10 ms
    # requests need ~2 s for these 400.
    scenario = tmp_path / "closed.yaml"
    scenario.write_text(
        "name: closed\nseed: 1\ngroups:\n  - {name: g, count: 1, prompt: {tokens: 32}, "
        "max_tokens: 8}\narrival: {closed: {concurrency: 2, count: 400, duration_s: 1.0}}\n"
        "sim: {profile: tiny}\n"
    )
    proc = loadgen("run", scenario, "--out", tmp_path / "runs", "--no-progress",
                   "--workers", workers)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (run,) = (tmp_path / "runs").iterdir()
    recs = read_streams(run)
    assert 2 <= len(recs) < 400
    first = min(r.t_intended_ns for r in recs)
    assert max(r.t_sent_ns for r in recs) - first < 1_000_000_000 + 200_000_000
