"""The server's log as a witness (loadgen/enginelog.py, analysis/server_log.py): vLLM's engine
lines parsed, placed on the run clock and judged against /metrics, both ways; and the sim's
lines, printed in vLLM's words, read back through a launched sim's log.

tests/data/h200_vllm_engine.log is the vLLM 0.26.0 boot log of a capacity search on an H200
(/work/notes/h200final/cap/20261204T073627Z-capacity_seats/boot/vllm-53151.log: its version
line, its KV line and its six engine lines), and h200_vllm_metrics.jsonl the four probes'
/metrics polls of that boot (generation tokens, running, waiting), each probe's run clock moved
onto the first's by the probes' started_wall (H200_START_WALL_NS: the first probe's). The host
logged in UTC.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from loadgen.analysis.server_log import (
    Bounds,
    LogPoint,
    ServerLogWitness,
    log_witness,
    server_log_witness,
)
from loadgen.analysis.summary import analyze_run
from loadgen.analysis.summary_types import read_run
from loadgen.analysis.timeline import Timeline
from loadgen.codec import to_json
from loadgen.engine.run import RunOptions, run_plan
from loadgen.enginelog import EngineLine, engine_line, parse_engine_lines, parse_request_timings
from loadgen.records import SERVER_LOG, read_metrics_sample
from loadgen.report.text import header
from loadgen.report.witness_lines import server_log_lines, server_log_table
from loadgen.scenario.load import load_scenario
from loadgen.scenario.plan import plan
from loadgen.server.spec import ServerSpec
from loadgen.sim.statlog import INTERVAL_ENV

from support.cli import assert_one_line_error, loadgen
from support.paths import DATA
from support.run_fixtures import ns, stream, ticks

H200_START_WALL_NS = 1796369853584183040


def h200() -> tuple[list[EngineLine], Timeline]:
    lines = parse_engine_lines((DATA / "h200_vllm_engine.log").read_text())
    rows = (DATA / "h200_vllm_metrics.jsonl").read_text().splitlines()
    return lines, Timeline([read_metrics_sample(json.loads(r)) for r in rows])


def test_the_h200_log_parses_as_vllm_printed_it() -> None:
    lines, _ = h200()
    assert len(lines) == 6
    assert lines[5] == EngineLine("12-04 07:38:33", 0, 6553.0, 874.3, 16, 0, 2.0, 0.0, 0)


def test_the_h200_engine_lines_agree_with_metrics_within_5_percent() -> None:
    lines, timeline = h200()
    witness = log_witness(lines, timeline, H200_START_WALL_NS, 0)
    judged = witness.judged
    # The first line's interval began before the first poll: its queues are judged, not its
    # throughput. Five lines fit the phase: each line was logged 0.38 s into its second.
    assert witness.interval_s == 10.0 and len(judged) == 6
    assert witness.phase_s == pytest.approx(0.38, abs=0.02)
    rated = [p for p in judged if p.metrics_gen_mid_tok_s is not None]
    assert [p.gen_tok_s for p in rated] == [149.4, 143.4, 287.6, 442.0, 874.3]
    for p in rated:
        assert p.metrics_gen_mid_tok_s is not None
        assert p.gen_tok_s == pytest.approx(p.metrics_gen_mid_tok_s, rel=0.05)
    for p in judged:
        assert p.metrics_running is not None and p.metrics_waiting is not None
        assert p.metrics_running.holds(p.running) and p.metrics_waiting.holds(p.waiting)
        assert p.agrees
    assert not any(line.startswith("!!") for line in server_log_lines(witness))


@pytest.mark.parametrize(
    ("index", "change"),
    [(3, {"gen_tok_s": 287.6 * 1.25}), (2, {"running": 5}), (3, {"waiting": 1})],
    ids=["generation", "running", "waiting"],
)
def test_a_line_that_disagrees_with_metrics_is_flagged(
    index: int, change: dict[str, float]
) -> None:
    lines, timeline = h200()
    # 07:38:13's line (index 3): 287.6 tok/s with 4 running, 0 waiting, where the polls allow
    # 281.5-295.6 tok/s, 0-4 running and none waiting; 07:38:03's (index 2): 4 running, and the
    # polls around it held 4.
    lines[index] = dataclasses.replace(lines[index], **change)  # type: ignore[arg-type]
    witness = log_witness(lines, timeline, H200_START_WALL_NS, 0)
    at = 29.8 if index == 2 else 39.8
    assert [p.t_s for p in witness.disagreeing] == [pytest.approx(at, abs=0.02)]
    flagged = [line for line in server_log_lines(witness) if line.startswith("!!")]
    assert len(flagged) == 1 and f"at {at:.0f} s" in flagged[0]
    table = server_log_table({"run": {"server_log": to_json(witness)}})
    assert table is not None and [row[-1] for row in table.rows].count("!! no") == 1


def test_a_count_outside_polls_that_moved_is_beyond_their_resolution() -> None:
    # Index 3's polls went 0 -> 4 running: a batch can end and refill between two polls, so a
    # count outside them is not judged; its throughput still is, and agrees.
    lines, timeline = h200()
    lines[3] = dataclasses.replace(lines[3], running=5)
    witness = log_witness(lines, timeline, H200_START_WALL_NS, 0)
    point = witness.points[3]
    assert point.metrics_running == Bounds(0.0, 4.0) and point.agrees is True
    assert witness.disagreeing == []
    assert not any(line.startswith("!!") for line in server_log_lines(witness))


def test_too_few_lines_to_fit_leave_the_whole_second() -> None:
    lines, timeline = h200()
    witness = log_witness(lines[:3], timeline, H200_START_WALL_NS, 0)
    assert witness.phase_s is None
    (rated, *_) = [p for p in witness.points if p.metrics_gen_tok_s is not None]
    # A window ending anywhere in 07:37:53's second: 9 s of polls inside, 11 s around.
    assert rated.metrics_gen_tok_s == Bounds(129.8, 166.0)


def test_the_zone_places_the_lines() -> None:
    # The same log read as if stamped an hour east of UTC lands an hour early: off the polls.
    lines, timeline = h200()
    assert log_witness(lines, timeline, H200_START_WALL_NS, 3600).points == ()


def test_vllm_032s_line_with_its_optional_parts() -> None:
    # vllm/v1/metrics/loggers.py (0.32.0) LoggingStatLogger.log on a CPU build, every part on.
    text = (
        "(APIServer pid=9) INFO 12-31 23:59:59 [loggers.py:335] Engine 001: Avg prompt "
        "throughput: 12.3 tokens/s, Avg generation throughput: 45.6 tokens/s, Running: 3 reqs, "
        "Waiting: 2 reqs, Deferred: 1 reqs, Preemptions: 4, CPU KV cache usage: 7.5%, Prefix "
        "cache hit rate: 33.3%\n"
    )
    (line,) = parse_engine_lines(text)
    assert line == EngineLine("12-31 23:59:59", 1, 12.3, 45.6, 3, 2, 7.5, 33.3, 4)
    # Read on New Year's morning, the stamp is last year's.
    assert line.epoch_s(1_798_761_600 + 3600, 0) == 1_798_761_599


def test_the_sims_line_reads_back() -> None:
    text = engine_line("01-02 03:04:05", prompt_tok_s=1.25, gen_tok_s=99.94, running=7,
                       waiting=2, kv_usage=0.5, prefix_hit_rate=None)  # fmt: skip
    (line,) = parse_engine_lines(text)
    assert line == EngineLine("01-02 03:04:05", 0, 1.2, 99.9, 7, 2, 50.0, None, 0)


def _point(**kw: object) -> LogPoint:
    base: dict[str, object] = dict(t_s=1.0, gen_tok_s=1.0, prompt_tok_s=0.0, running=1,
                                   waiting=0, kv_perc=0.0, prefix_hit_perc=None,
                                   metrics_gen_tok_s=None, metrics_gen_mid_tok_s=None,
                                   metrics_running=None, metrics_waiting=None)  # fmt: skip
    return LogPoint(**(base | kw))  # type: ignore[arg-type]


def test_a_point_without_polls_is_not_judged() -> None:
    assert _point().agrees is None


SCENARIO = """
name: witness
api: completions
seed: 2
arrival: together
groups:
  - name: steady
    count: 4
    prompt: {tokens: 64, shape: prose, cache: salted}
    max_tokens: 3600
    ignore_eos: true
metrics: {poll_interval_s: 0.1}
sim: {profile: tiny, max_num_seqs: 4, max_num_batched_tokens: 256, block_size: 16,
      num_gpu_blocks: 1024, max_model_len: 4096}
"""


async def test_a_launched_sims_log_is_kept_and_agrees(tmp_path: Path) -> None:
    path = tmp_path / "witness.yaml"
    path.write_text(SCENARIO)
    spec = ServerSpec("sim", env=((INTERVAL_ENV, "2"),))
    opts = RunOptions(out_root=tmp_path, progress=False, server=spec, telemetry=False)
    run_dir = await run_plan(plan(load_scenario(path)), opts, warn=lambda m: None)
    assert (run_dir / SERVER_LOG).is_file()
    summary = analyze_run(run_dir).summary
    witness = read_run(summary).server_log
    assert witness is not None
    assert witness.interval_s == pytest.approx(2.0, abs=0.5)
    assert len(witness.judged) >= 2 and witness.disagreeing == []
    head = "\n".join(header(read_run(summary)))
    assert "server log: " in head and "!! server log" not in head
    table = server_log_table(summary)
    assert table is not None and "yes" in {row[-1] for row in table.rows}
    assert "!! no" not in {row[-1] for row in table.rows}
    # Routed over two replicas the polls are the fleet's sum, the log one replica's: judged
    # against each other they read a false "!! server log disagrees". Not judged.
    manifest = orjson.loads((run_dir / "run.json").read_bytes())
    urls = ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    manifest["targets"] = {"urls": urls, "route": "round-robin", "prefix_blocks": 4,
                           "block_chars": 256}  # fmt: skip
    (run_dir / "run.json").write_bytes(orjson.dumps(manifest))
    assert read_run(analyze_run(run_dir).summary).server_log is None


def test_server_log_needs_an_external_server_and_a_file(tmp_path: Path) -> None:
    alone = assert_one_line_error(loadgen("run", "smoke", "--server-log", tmp_path / "x.log"))
    assert "--server-log describe an external server: pass --base-url" in alone
    missing = loadgen("run", "smoke", "--base-url", "http://127.0.0.1:9", "--server-log",
                      tmp_path / "x.log")  # fmt: skip
    assert "--server-log " in assert_one_line_error(missing) and "no such file" in missing.stderr


async def test_an_external_servers_log_is_read_from_the_runs_start(tmp_path: Path) -> None:
    log = tmp_path / "sim.log"
    with open(log, "wb") as out:
        sim = subprocess.Popen(
            [sys.executable, "-m", "loadgen", "sim", "--port", "0", "--profile", "tiny",
             "--max-model-len", "4096"],
            stdout=out, stderr=subprocess.STDOUT, env={**os.environ, INTERVAL_ENV: "2"},
        )  # fmt: skip
    try:
        url = await _listening(log)
        path = tmp_path / "witness.yaml"
        path.write_text(SCENARIO)
        opts = RunOptions(base_url=url, out_root=tmp_path, progress=False, server_log=log,
                          telemetry=False)  # fmt: skip
        run_dir = await run_plan(plan(load_scenario(path)), opts, warn=lambda m: None)
    finally:
        sim.terminate()
        sim.wait(timeout=30)
    kept = (run_dir / SERVER_LOG).read_text()
    assert "non-default args" not in kept  # the boot, before the run, is not the run's
    assert "non-default args" in log.read_text()
    witness = read_run(analyze_run(run_dir).summary).server_log
    assert witness is not None and len(witness.judged) >= 2 and witness.disagreeing == []


async def _listening(log: Path) -> str:
    for _ in range(300):
        found = re.search(r"Listening on (\S+)", log.read_text())
        if found:
            return found.group(1)
        await asyncio.sleep(0.1)
    raise AssertionError(f"the sim did not start: {log.read_text()}")


def llama_timing(task: int, prompt: tuple[float, int], generated: tuple[float, int]) -> str:
    """print_timings' lines as llama.cpp 0.3.36's server prints them: its printf formats
    (%10.2f ms / %5d tokens (%8.2f ms per token, %8.2f tokens per second)) as f-strings."""
    pre = f"slot print_timing: id {0:2d} | task {task} | "

    def timed(ms: float, n: int) -> str:
        per = f"{ms / n:8.2f} ms per token, {n / ms * 1e3:8.2f} tokens per second"
        return f"{ms:10.2f} ms / {n:5d} tokens ({per})"

    (p_ms, p_n), (g_ms, g_n) = prompt, generated
    return (
        f"{pre}prompt eval time = {timed(p_ms, p_n)}\n"
        f"{pre}       eval time = {timed(g_ms, g_n)}\n"
        f"{pre}      total time = {p_ms + g_ms:10.2f} ms / {p_n + g_n:5d} tokens\n"
    )


# Two streams of 4 chunks, a token each, 30 ms apart: a decode span of 90 ms.
LLAMA_STREAMS = [stream(f"s{i}", chunks=ticks(1.0 + i, 4, 0.03), sent=0.9 + i) for i in range(2)]


def _llama_witness(*timings: str) -> ServerLogWitness:
    text = "srv  log_server_r: request: POST /v1/completions 127.0.0.1 200\n" + "".join(timings)
    return server_log_witness(text, LLAMA_STREAMS, Timeline([]), 0, 0)


def test_llama_cpp_timings_join_the_streams_they_time() -> None:
    w = _llama_witness(llama_timing(7, (12.5, 1000), (91.0, 4)),
                       llama_timing(9, (11.0, 1000), (88.5, 4)))  # fmt: skip
    assert w.kind == "llama.cpp" and [(c.stream, c.task) for c in w.requests] == [
        ("s0", 7),
        ("s1", 9),
    ]
    assert all(c.agrees for c in w.requests)
    assert w.requests[0].client_decode_ms == pytest.approx(90.0)
    lines = server_log_lines(w)
    assert not any(line.startswith("!!") for line in lines) and "2 agree" in lines[0]


@pytest.mark.parametrize("generated", [(91.0, 5), (140.0, 4)], ids=["tokens", "time"])
def test_a_llama_cpp_timing_that_disagrees_is_flagged(generated: tuple[float, int]) -> None:
    w = _llama_witness(llama_timing(7, (12.5, 1000), (91.0, 4)),
                       llama_timing(9, (11.0, 1000), generated))  # fmt: skip
    assert [c.agrees for c in w.requests] == [True, False]
    flagged = [line for line in server_log_lines(w) if line.startswith("!!")]
    assert len(flagged) == 1 and "stream s1 (task 9)" in flagged[0]


def test_llama_cpp_timings_that_do_not_pair_up_are_said() -> None:
    w = _llama_witness(llama_timing(7, (12.5, 1000), (91.0, 4)))
    assert w.requests == () and w.requests_note is not None
    assert server_log_lines(w)[0].startswith("!! server log: the server logged 1 request")


def test_a_log_without_either_is_said() -> None:
    w = server_log_witness("INFO nothing to see\n", LLAMA_STREAMS, Timeline([]), 0, 0)
    assert w.kind == "none" and "no vLLM engine line" in server_log_lines(w)[0]


def test_a_real_llama_cpp_log_parses() -> None:
    # A launched llama-server 0.3.36's log over tests/real/test_llamacpp_witness.py's run: four
    # requests on two slots, with its log's time prefix.
    timings = parse_request_timings((DATA / "llamacpp_timings.log").read_text())
    assert [(t.task, t.prompt_tokens, t.eval_tokens) for t in timings] == [
        (6, 64, 200),
        (9, 64, 200),
        (10, 64, 200),
        (11, 64, 200),
    ]
    assert (timings[0].prompt_ms, timings[0].eval_ms) == (5.02, 109.72)


def test_streams_sent_together_take_the_timings_nearest_their_spans() -> None:
    # Sent 0.1 ms apart, the server took s1 first: its task's 30 ms eval is s1's 30 ms span.
    together = [stream("s0", chunks=ticks(1.0, 4, 0.03), sent=0.9),
                stream("s1", chunks=ticks(1.0, 4, 0.01), sent=0.9001)]  # fmt: skip
    text = llama_timing(3, (5.0, 1000), (31.0, 4)) + llama_timing(4, (5.0, 1000), (89.0, 4))
    w = server_log_witness(text, together, Timeline([]), 0, 0)
    assert [(c.stream, c.task, c.agrees) for c in w.requests] == [("s1", 3, True), ("s0", 4, True)]
    # Sent 50 ms apart they are told apart by order, and the swap shows.
    apart = [together[0], dataclasses.replace(together[1], t_sent_ns=ns(0.95))]
    w = server_log_witness(text, apart, Timeline([]), 0, 0)
    assert [(c.stream, c.agrees) for c in w.requests] == [("s0", False), ("s1", False)]
