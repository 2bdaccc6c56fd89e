"""The benchmark block (vllm bench serve's fields) per group and in total, exact values."""

from __future__ import annotations

import dataclasses
from dataclasses import astuple
from pathlib import Path

import orjson
import pytest

from loadgen.analysis.benchmark import Benchmark, BenchStats, benchmark_block
from loadgen.codec import from_json, to_json
from loadgen.report.cmd import write_report

from support.run_fixtures import failed, stream, write_run


def records() -> list:
    a = stream("a", chunks=[0.1, 0.2, 0.3], tokens=[1, 2, 1], sent=0.0, prompt=1000)
    b = stream("b", chunks=[0.65, 0.8], sent=0.5, prompt=500, completion=3, done=0.9,
               token_source="usage_final")  # fmt: skip
    b = dataclasses.replace(b, prompt_tokens=None)  # the server sent no prompt count
    return [a, b, failed("c", sent=0.2, done=0.4, group="h")]


def test_the_total_counts_every_request_and_times_the_ok_ones() -> None:
    total = benchmark_block(records()).total
    assert (total.requests_ok, total.requests_failed) == (2, 1)
    assert total.duration_s == pytest.approx(0.9)  # first intended send to last end
    assert total.request_per_s == pytest.approx(2 / 0.9)
    assert (total.output_tokens, total.prompt_tokens) == (7, 1500)
    assert total.output_tok_s == pytest.approx(7 / 0.9)
    assert total.total_tok_s == pytest.approx(1507 / 0.9)
    assert total.output_token_source == "mixed:usage_continuous+usage_final"
    assert total.prompt_token_source == "requested+usage"
    # TTFT 100 and 150 ms; TPOT 200 ms / 3 tokens and 150 ms / 2; E2E 301 and 400 ms.
    assert astuple(total.ttft_ms) == pytest.approx((125, 125, 145, 149.5))
    assert astuple(total.tpot_ms) == pytest.approx((70.8333, 70.8333, 74.1667, 74.9167), abs=1e-3)
    # a's gaps spread over the tokens they carried (50, 50, 100), b's one gap over 2 tokens.
    assert astuple(total.itl_ms) == pytest.approx((68.75, 62.5, 92.5, 99.25))
    assert astuple(total.e2e_ms) == pytest.approx((350.5, 350.5, 390.1, 399.01))


def test_a_group_of_failures_is_counted_and_never_timed() -> None:
    h = benchmark_block(records()).groups["h"]
    assert (h.requests_ok, h.requests_failed) == (0, 1)
    assert h.duration_s == pytest.approx(0.2)
    assert (h.request_per_s, h.output_tok_s) == (0.0, 0.0)
    assert h.output_token_source is None and h.prompt_token_source is None
    assert h.ttft_ms == BenchStats(None, None, None, None)


def test_the_block_reads_back_as_written() -> None:
    block = benchmark_block(records())
    assert from_json(Benchmark, orjson.loads(orjson.dumps(to_json(block)))) == block


def test_summary_json_and_the_report_carry_the_block(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", records())
    write_report(run)
    summary = orjson.loads((run / "summary.json").read_bytes())
    assert summary["benchmark"]["total"]["requests_ok"] == 2
    assert sorted(summary["benchmark"]["groups"]) == ["g", "h"]
    text = (run / "report.txt").read_text()
    throughput = text[text.index("Benchmark (measure phase") :].splitlines()
    total = next(line for line in throughput if line.startswith("total"))
    assert total.split()[:6] == ["total", "2", "1", "0.900", "2.22", "7.8"]
    assert "Benchmark latency, ms: mean / median / p90 / p99" in text
    assert "125.0/125.0/145.0/149.5" in text
