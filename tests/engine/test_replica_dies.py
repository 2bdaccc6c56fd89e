"""One of two replicas (real `loadgen sim` processes on 127.0.0.1) SIGKILLed mid-run: its
streams are error records with their class, the other replica's all finish, and the report
says which replica failed when. The same run with both alive names no failure."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from loadgen.analysis.inputs import read_manifest
from loadgen.commands.run import FAILED_STREAMS_EXIT
from loadgen.records import read_streams

from support.server_process import run_until, sim_process

# 40 salted 200-token prompts, one every 50 ms round-robin over two tiny sims: each stream
# takes ~130 ms (measured), so the kill after 10 records lands with the rep half sent.
SCENARIO = """
name: two
seed: 5
api: completions
arrival: {staggered: {interval_s: 0.05}}
groups:
  - name: g
    count: 40
    prompt: {tokens: 200, shape: prose, cache: salted}
    max_tokens: 64
metrics: {poll_interval_s: 0.1}
"""
KILL_AFTER = 10
# Reset mid-stream, or refused after the kill.
GONE = {"connection_closed", "connect_error"}


def run_two(tmp_path: Path, name: str, *, kill_second: bool) -> tuple[int, str, Path, list[str]]:
    scenario = tmp_path / "two.yaml"
    scenario.write_text(SCENARIO)
    with (
        sim_process(tmp_path / f"{name}0.log", "--profile", "tiny") as (_, url0),
        sim_process(tmp_path / f"{name}1.log", "--profile", "tiny") as (sim1, url1),
    ):
        args = ["run", str(scenario), "--base-url", url0, "--base-url", url1]
        rc, out = run_until(KILL_AFTER, args, tmp_path / name, kill=sim1 if kill_second else None)
    (run_dir,) = list((tmp_path / name).iterdir())
    return rc, out, run_dir, [url0, url1]


def test_a_killed_replica_fails_its_streams_and_the_report_says_when(tmp_path: Path) -> None:
    rc, out, run_dir, urls = run_two(tmp_path, "killed", kill_second=True)
    assert "Traceback" not in out, out
    assert rc == FAILED_STREAMS_EXIT, out
    recs = read_streams(run_dir)
    assert len(recs) == 40
    first = [r for r in recs if r.replica == 0]
    second = [r for r in recs if r.replica == 1]
    assert len(first) == len(second) == 20  # round-robin goes on sending to the dead one
    assert all(r.status == "ok" for r in first)
    failed = [r for r in second if r.error is not None]
    assert failed and {r.error.cls for r in failed} <= GONE
    assert sum(r.status == "ok" for r in second) >= KILL_AFTER // 2 - 1  # served before

    targets = read_manifest(run_dir).targets
    assert targets is not None
    assert list(targets.urls) == urls and targets.route == "round-robin"
    summary = orjson.loads((run_dir / "summary.json").read_bytes())
    rows = summary["replicas"]["rows"]
    down = min((r.t_done_ns, r.error.cls) for r in failed if r.t_done_ns is not None)
    assert rows[1]["failed_at_s"] == pytest.approx(down[0] / 1e9, abs=1e-6)
    assert rows[1]["failed_class"] == down[1]
    assert rows[1]["errors"] == {
        cls: sum(r.error.cls == cls for r in failed) for cls in {r.error.cls for r in failed}
    }
    assert rows[0]["failed_at_s"] is None and rows[0]["errors"] == {}
    total = summary["replicas"]["total"]
    assert (rows[0]["ok"], total["ok"]) == (20, 40 - len(failed))
    report = (run_dir / "report.txt").read_text()
    said = f"!! replica 1 ({urls[1]}) failed at {down[0] / 1e9:.3f} s: its first {down[1]} stream"
    assert said in report, report
    assert "!! replica 0" not in report
    # The dead replica's scrapes after the kill are recorded as failed, the live one's are not.
    lines = (run_dir / "replica_metrics.jsonl").read_bytes().splitlines()
    samples = [orjson.loads(x) for x in lines]
    assert any(s["replica"] == 1 and s["error"] for s in samples)
    assert not any(s["replica"] == 0 and s["error"] for s in samples)


def test_the_same_run_with_both_replicas_alive_names_no_failure(tmp_path: Path) -> None:
    rc, out, run_dir, _ = run_two(tmp_path, "alive", kill_second=False)
    assert rc == 0, out
    recs = read_streams(run_dir)
    assert len(recs) == 40 and all(r.status == "ok" for r in recs)
    assert sorted(r.replica for r in recs) == [0] * 20 + [1] * 20
    rows = orjson.loads((run_dir / "summary.json").read_bytes())["replicas"]["rows"]
    assert [r["failed_at_s"] for r in rows] == [None, None]
    report = (run_dir / "report.txt").read_text()
    assert "Replicas" in report and "!! replica" not in report


def test_a_replica_dead_from_the_start_fails_only_its_own_streams(tmp_path: Path) -> None:
    # Nothing listens on a port just closed: the rep's connection warm-up is refused there.
    with socket.create_server(("127.0.0.1", 0)) as s:
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    scenario = tmp_path / "two.yaml"
    scenario.write_text(SCENARIO)
    with sim_process(tmp_path / "sim.log", "--profile", "tiny") as (_, url):
        args = ["run", str(scenario), "--base-url", url, "--base-url", dead]
        rc, out = run_until(KILL_AFTER, args, tmp_path / "out", kill=None)
    assert rc == FAILED_STREAMS_EXIT, out
    (run_dir,) = list((tmp_path / "out").iterdir())
    recs = read_streams(run_dir)
    assert [r.status for r in recs if r.replica == 0] == ["ok"] * 20
    assert {r.error.cls for r in recs if r.replica == 1 and r.error} == {"connect_error"}
    assert f"!! replica 1 ({dead}) failed at" in (run_dir / "report.txt").read_text()


def test_request_routes_its_streams_round_robin_over_two_replicas(tmp_path: Path) -> None:
    # bench/ceiling.py spreads the server side over firehose processes this way.
    out = tmp_path / "out"
    with (
        sim_process(tmp_path / "r0.log", "--profile", "tiny") as (_, url0),
        sim_process(tmp_path / "r1.log", "--profile", "tiny") as (_, url1),
    ):
        args = ["request", "--base-url", url0, "--base-url", url1, "-n", "8", "-c", "2",
                "--max-tokens", "4", "--prompt-tokens", "8", "--out", str(out)]  # fmt: skip
        done = subprocess.run([sys.executable, "-m", "loadgen", *args], capture_output=True,
                              text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    recs = read_streams(out)
    assert sorted(r.replica for r in recs) == [0] * 4 + [1] * 4
    assert all(r.status == "ok" for r in recs)
    # The terminal names both (its head named the first URL alone) and prints the replicas'
    # table, where a failed one says when (only a later `loadgen report` did).
    assert "2 replicas (route round-robin)" in done.stdout
    assert "Replicas" in done.stdout and "!! replica" not in done.stdout
    refused = subprocess.run([sys.executable, "-m", "loadgen", "request", "--sim-replicas", "2"],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    assert refused.returncode == 2
    assert "request streams to servers by URL: repeat --base-url" in refused.stderr


def test_request_says_which_replica_failed_when(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as s:
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    with sim_process(tmp_path / "r0.log", "--profile", "tiny") as (_, url0):
        args = ["request", "--base-url", url0, "--base-url", dead, "-n", "8", "-c", "2",
                "--max-tokens", "4", "--prompt-tokens", "8",
                "--out", str(tmp_path / "out")]  # fmt: skip
        done = subprocess.run([sys.executable, "-m", "loadgen", *args], capture_output=True,
                              text=True, timeout=120)  # fmt: skip
    assert done.returncode == FAILED_STREAMS_EXIT, done.stdout + done.stderr
    assert f"!! replica 1 ({dead}) failed at" in " ".join(done.stdout.split())
