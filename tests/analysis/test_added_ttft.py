"""Added TTFT (analysis/added_ttft.py): the client's mean TTFT minus the server histogram's over
the same requests, on the virtual clock (exact), over HTTP to the sim (wall clock), and its
report lines both ways."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.analysis.added_ttft import COUNT, SUM, AddedTtft, AddedTtftBlock, added_ttft
from loadgen.analysis.summary import analyze_run
from loadgen.analysis.summary_types import read_run
from loadgen.analysis.timeline import Timeline
from loadgen.engine.run import RunOptions, run_plan
from loadgen.exposition import parse_exposition
from loadgen.records import MetricsSample
from loadgen.report.text import header
from loadgen.report.witness_lines import NO_HISTOGRAM, added_ttft_lines
from loadgen.scenario.load import load_scenario
from loadgen.scenario.plan import plan
from loadgen.sim.engine import EngineConfig
from loadgen.sim.profiles import sim_profile
from loadgen.sim.server import SimServerConfig, start_sim_server

from support.run_fixtures import ns, sample, stream
from support.virtual import run_virtual

ONE_GROUP = """
name: one_group
api: completions
seed: 3
arrival: together
groups:
  - name: short
    count: {count}
    prompt: {{tokens: 48, shape: code, cache: salted}}
    max_tokens: 8
metrics: {{poll_interval_s: 0.05}}
sim: {{profile: tiny, max_num_seqs: 4, max_num_batched_tokens: 256, block_size: 16,
       num_gpu_blocks: 1024, max_model_len: 1024}}
"""


def one_group(tmp_path: Path, count: int = 3) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "one_group.yaml"
    path.write_text(ONE_GROUP.format(count=count))
    return path


def _block(summary: dict) -> AddedTtftBlock:
    block = read_run(summary).added_ttft
    assert block is not None
    return block


async def test_virtual_sim_adds_nothing_to_its_own_histogram(tmp_path: Path) -> None:
    run = await run_virtual(one_group(tmp_path), [], tmp_path)
    block = _block(run.summary)
    assert block.histogram and block.run is not None
    assert block.run.matched and block.run.streams == 3
    # On the virtual clock the client reads the first chunk when the engine's step ends.
    assert block.run.added_ms == pytest.approx(0.0, abs=1e-6)
    assert not any(line.startswith("!!") for line in header(read_run(run.summary)))


async def test_virtual_api_delay_is_added_exactly(tmp_path: Path) -> None:
    run = await run_virtual(one_group(tmp_path), ["sim.api_delay_s=0.037"], tmp_path)
    block = _block(run.summary)
    assert block.run is not None and block.run.matched
    assert block.run.added_ms == pytest.approx(37.0, abs=1e-6)
    head = "\n".join(header(read_run(run.summary)))
    assert "the sim's API delay (virtual clock: no HTTP path) added 37.00 ms per request" in head


async def test_api_delay_at_speed_is_wall_time(tmp_path: Path) -> None:
    # The histogram is in engine seconds; at speed 2 the 40 ms of engine time is 20 ms of wall.
    overrides = ["sim.api_delay_s=0.04", "sim.speed=2"]
    run = await run_virtual(one_group(tmp_path), overrides, tmp_path)
    block = _block(run.summary)
    assert block.run is not None and block.run.added_ms == pytest.approx(20.0, abs=1e-6)


async def test_groups_in_flight_together_have_no_figure_of_their_own(tmp_path: Path) -> None:
    run = await run_virtual("smoke", ["sim.api_delay_s=0.01"], tmp_path)
    block = _block(run.summary)
    assert block.run is not None and block.run.matched and block.run.streams == 4
    assert block.groups == () and block.groups_note is not None
    assert any("per group: none" in line for line in added_ttft_lines(block))


async def test_groups_apart_each_have_their_figure(tmp_path: Path) -> None:
    # One after another: a poll between them separates their windows.
    run = await run_virtual("smoke", ["groups.short.start=1", "sim.api_delay_s=0.01"], tmp_path)
    block = _block(run.summary)
    assert {g.scope for g in block.groups} == {"long", "short"}
    assert all(g.matched and g.added_ms == pytest.approx(10.0, abs=1e-6) for g in block.groups)


def _hist(t: float, total_s: float, count: float) -> MetricsSample:
    return MetricsSample(ns(t), {SUM: total_s, COUNT: count})


def _scope_of(count_end: float) -> AddedTtft:
    recs = [stream(f"s{i}", chunks=[1.5, 1.6], sent=1.0) for i in range(2)]
    timeline = Timeline([_hist(0.9, 0.0, 0), _hist(2.1, 0.8, count_end)])
    block = added_ttft(recs, recs, timeline, 1.0)
    assert block is not None and block.run is not None
    return block.run


def test_count_mismatch_is_said_and_a_match_is_not() -> None:
    matched = _scope_of(2)
    assert matched.matched and matched.added_ms == pytest.approx(100.0)
    assert not added_ttft_lines(AddedTtftBlock(True, matched))[0].startswith("!!")
    other = _scope_of(3)
    assert not other.matched
    line = added_ttft_lines(AddedTtftBlock(True, other))[0]
    assert line.startswith("!! ") and "counted 3 requests, loadgen timed 2" in line


def test_a_ttft_the_server_observes_late_still_falls_inside_the_window() -> None:
    # Two streams: first tokens at 1.01 and 1.02 s, ends at 1.05 s. The server observed the
    # second TTFT only after a poll at 1.025 s (a busy API server records it after sending the
    # token): the window runs to the first poll after the streams' last end, not first token.
    recs = [stream(f"s{i}", chunks=[1.01 + i / 100, 1.04], sent=1.0, done=1.05) for i in range(2)]
    polls = [_hist(0.9, 0.0, 0), _hist(1.025, 0.01, 1), _hist(1.06, 0.03, 2)]
    block = added_ttft(recs, recs, Timeline(polls), 1.0)
    assert block is not None and block.run is not None
    assert block.run.matched and block.run.server_requests == 2
    assert block.run.added_ms == pytest.approx(0.0, abs=1e-9)


def test_a_server_without_a_histogram_is_said() -> None:
    recs = [stream("s0", chunks=[1.5, 1.6], sent=1.0)]
    block = added_ttft(recs, recs, Timeline([sample(0.9, running=0)]), 1.0)
    assert block == AddedTtftBlock(histogram=False)
    assert added_ttft_lines(block) == [NO_HISTOGRAM]


def _http_config(api_delay_s: float) -> SimServerConfig:
    engine = EngineConfig(max_num_seqs=4, max_num_batched_tokens=256, block_size=16,
                          num_gpu_blocks=1024, profile=sim_profile("tiny"))  # fmt: skip
    return SimServerConfig(engine=engine, max_model_len=1024, api_delay_s=api_delay_s)


async def _added_over_http(tmp_path: Path, api_delay_s: float) -> AddedTtft:
    async with start_sim_server(_http_config(api_delay_s)) as sim:
        opts = RunOptions(base_url=sim.url, out_root=tmp_path, progress=False)
        scenario = load_scenario(one_group(tmp_path, 8))
        run_dir = await run_plan(plan(scenario), opts, warn=lambda m: None)
    summary = analyze_run(run_dir).summary
    block = _block(summary)
    assert block.run is not None and block.run.matched and block.run.streams == 8
    assert block.run.added_ms is not None
    head = "\n".join(header(read_run(summary)))
    assert f"loadgen + network + API server added {block.run.added_ms:.2f} ms per request" in head
    return block.run


async def test_http_sim_added_ttft_is_small_and_finds_a_known_delay(tmp_path: Path) -> None:
    plain = await _added_over_http(tmp_path / "plain", 0.0)
    delayed = await _added_over_http(tmp_path / "delayed", 0.08)
    # Client and sim share one event loop on a busy 2-core box: loopback plus the loop's
    # turn is ~1 ms idle, tens of ms at worst under a parallel test run.
    assert plain.added_ms is not None and 0.0 <= plain.added_ms < 40.0
    assert delayed.added_ms is not None
    assert delayed.added_ms - plain.added_ms == pytest.approx(80.0, abs=30.0)
    assert delayed.added_ms >= 80.0


def test_sglangs_histogram_reads_as_the_ttft_histogram() -> None:
    text = (
        "# TYPE sglang:time_to_first_token_seconds histogram\n"
        'sglang:time_to_first_token_seconds_sum{model_name="m"} 0.30457592010498047\n'
        'sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 7.0\n'
        'sglang:time_to_first_token_seconds_count{model_name="m"} 7.0\n'
    )
    assert parse_exposition(text).values == {SUM: 0.30457592010498047, COUNT: 7.0}


async def test_warmups_and_reps_stay_outside_the_windows(tmp_path: Path) -> None:
    # A warmup before the reps and a second rep after the first: the rep-edge polls keep both
    # the warmup's and each rep's histogram rises apart, so the server counts the 6 measured.
    overrides = ["warmup={count: 2, tokens: 32, max_tokens: 2}", "repetitions=2",
                 "sim.api_delay_s=0.005"]  # fmt: skip
    run = await run_virtual(one_group(tmp_path), overrides, tmp_path)
    block = _block(run.summary)
    assert block.run is not None and block.run.matched
    assert (block.run.streams, block.run.windows) == (6, 2)
    assert block.run.added_ms == pytest.approx(5.0, abs=1e-6)
