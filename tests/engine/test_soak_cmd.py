"""`loadgen soak` end to end: on the virtual clock (exact), against a sim over HTTP that dies,
and killed with SIGKILL halfway (the report of the recorded part, no completed stream lost)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import orjson
from click.testing import CliRunner

from loadgen.cli import main
from loadgen.engine.run import RunOptions, run_plan
from loadgen.engine.soak import SoakStop, soak_scenario
from loadgen.records import read_jsonl, read_streams
from loadgen.scenario.load import load_scenario
from loadgen.scenario.model import Soak
from loadgen.scenario.plan import plan
from loadgen.sim.engine import EngineConfig
from loadgen.sim.profiles import sim_profile
from loadgen.sim.server import SimServerConfig, ground_truth_rows, start_sim_server

from support.sim import wait_until


def only_dir(root: Path) -> Path:
    (d,) = [p for p in root.iterdir() if p.is_dir()]
    return d


def test_a_leak_on_the_virtual_clock_is_drift_and_the_report_has_every_part(tmp_path: Path):
    args = ["soak", "soak_steady", "--duration", "10m", "--fault", "drift=30", "--out",
            str(tmp_path), "--no-progress"]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    run = only_dir(tmp_path)
    text = (run / "report.txt").read_text()
    assert "VERDICT: drift: decode got slower" in text
    assert "Soak windows (thirds)" in text and "first third" in text and "last third" in text
    assert "Decode tok/s by context bin" in text
    assert "no client in the loop" in text
    assert "ended: duration reached" in text and "past its 600 s duration" not in text
    assert (run / "rate.png").read_bytes().startswith(b"\x89PNG")
    assert "data:image/png;base64" in (run / "report.html").read_text()
    soak = orjson.loads((run / "soak.json").read_bytes())
    assert soak["verdict"]["verdict"] == "drift"
    # The windows tile the 10 engine minutes; the server's own counters are there per window.
    assert soak["windows"][-1]["to_s"] <= 600 + 60
    assert all(w["server"]["generation_tokens"] > 0 for w in soak["windows"])
    # `loadgen report` recomputes the same report from the directory alone.
    again = CliRunner().invoke(main, ["report", str(run)])
    assert again.exit_code == 0
    assert orjson.loads((run / "soak.json").read_bytes()) == soak
    assert soak["records"]["unreadable_lines"] == 0 and "!! TORN" not in text
    # Its CSV is on the run clock, the report on the sim's (speed 20): the export says so, and
    # the soak's request cap is no plan with missing streams.
    exported = CliRunner().invoke(main, ["export", str(run), "--out", str(tmp_path / "csv")])
    assert "note: times and rates are on the run clock; the sim ran at speed 20" in exported.output
    assert "MISSING" not in exported.output
    # A torn last line is said, as a run's report says it (the soak's said nothing).
    streams = run / "streams.jsonl"
    streams.write_bytes(streams.read_bytes()[:-40])
    torn = CliRunner().invoke(main, ["report", str(run)])
    assert "!! TORN: 1 line(s) of streams.jsonl could not be read" in torn.output
    assert orjson.loads((run / "soak.json").read_bytes())["records"]["unreadable_lines"] == 1


def test_fixed_time_windows_from_the_command_line(tmp_path: Path):
    args = ["soak", "soak_steady", "--duration", "6m", "--window", "2m", "--out", str(tmp_path),
            "--no-progress"]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    soak = orjson.loads((only_dir(tmp_path) / "soak.json").read_bytes())
    assert [round(w["from_s"]) for w in soak["windows"]][:3] == [0, 120, 240]


def test_a_bad_soak_block_is_one_line_naming_the_field(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: bad\nseed: 1\ngroups:\n  - {name: g, count: 1, prompt: {tokens: 64}, "
        "max_tokens: 4}\nsoak:\n  duration: forever\n"
    )
    result = CliRunner().invoke(main, ["soak", str(bad), "--out", str(tmp_path)])
    assert result.exit_code != 0
    assert "soak.duration" in result.output and "forever" in result.output
    assert "Traceback" not in result.output
    result = CliRunner().invoke(main, ["soak", "soak_steady", "--window", "often"])
    assert result.exit_code != 0 and "use `thirds` or a length" in result.output


def sim_config(speed: float) -> SimServerConfig:
    engine = EngineConfig(max_num_seqs=4, num_gpu_blocks=4096, profile=sim_profile("default"))
    return SimServerConfig(engine=engine, max_model_len=8192, speed=speed)


async def test_a_server_that_dies_mid_soak_ends_it_with_that_fact_in_the_report(tmp_path):
    scenario = soak_scenario(
        load_scenario(
            "soak_steady", ["groups.steady.prompt.tokens=200", "groups.steady.max_tokens=16"]
        ),
        Soak(duration_s=3600.0),
    )
    stop = SoakStop(3600.0)
    async with start_sim_server(sim_config(speed=20.0)) as sim:
        opts = RunOptions(
            base_url=sim.url, out_root=tmp_path, progress=False, stop=stop, self_watch=True
        )
        run = asyncio.create_task(run_plan(plan(scenario), opts, warn=lambda m: None))
        await wait_until(lambda: _lines(tmp_path) >= 8 and _lines(tmp_path, "client") >= 2,
                         timeout_s=60)  # fmt: skip
    # The sim is gone; the soak must notice, stop and leave a readable directory.
    run_dir = await asyncio.wait_for(run, timeout=60)
    manifest = orjson.loads((run_dir / "run.json").read_bytes())
    assert manifest["soak_end"]["reason"] == "server unreachable"
    # The client watched itself all along, once a second.
    watched = list(read_jsonl(run_dir / "client.jsonl"))
    assert watched and all(s["rss_bytes"] > 0 for s in watched)
    result = CliRunner().invoke(main, ["report", str(run_dir)])
    assert result.exit_code == 0, result.output
    assert "!! the server stopped serving mid-soak" in result.output
    assert "Traceback" not in result.output


def _lines(root: Path, name: str = "streams") -> int:
    dirs = [p for p in root.iterdir() if p.is_dir()]
    return sum(1 for d in dirs for _ in read_jsonl(d / f"{name}.jsonl"))


async def test_sigkill_halfway_keeps_every_completed_stream_and_reports_the_part(tmp_path):
    async with start_sim_server(sim_config(speed=20.0)) as sim:
        proc = await asyncio.create_subprocess_exec(
            str(Path(sys.executable).parent / "loadgen"), "soak", "soak_steady",
            "--base-url", sim.url,
            "--duration", "1h", "--no-progress", "--out", str(tmp_path),
            "--set", "groups.steady.prompt.tokens=200", "--set", "groups.steady.max_tokens=16",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        try:
            await wait_until(lambda: tmp_path.exists() and any(tmp_path.iterdir())
                             and _lines(tmp_path) >= 20, timeout_s=90)  # fmt: skip
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            await proc.wait()
        finished = {
            r["client_request_id"]
            for r in ground_truth_rows(sim.state)
            if r["finish_reason"] == "length" and r["client_request_id"]
        }
    run = only_dir(tmp_path)
    recorded = {r.id for r in read_streams(run)}
    # One stream in flight (concurrency 1) may have finished in the engine without the client
    # having read its end; every other finished stream is on disk.
    assert len(finished - recorded) <= 1
    assert len(recorded) >= 20
    result = CliRunner().invoke(main, ["report", str(run)])
    assert result.exit_code == 0, result.output
    assert "ended: interrupted" in result.output
    soak = orjson.loads((run / "soak.json").read_bytes())
    # The report covers every recorded stream that has a decode window (at speed 20 some
    # 16-token streams arrive in one read: no window, no rate, rightly not counted).
    decoded = [r for r in read_streams(run) if r.status == "ok" and r.t_last_ns > r.t_first_ns]
    assert soak["requests"] == len(decoded) > 0
