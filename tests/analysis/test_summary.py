"""summary.json: statistics, field names, byte-for-byte reproduction, sweeps, bad paths."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from loadgen.analysis.inputs import RunInputs
from loadgen.analysis.summary import analyze
from loadgen.analysis.sweep_types import MixedRow
from loadgen.cli import main
from loadgen.codec import from_json, to_json
from loadgen.records import StreamError
from loadgen.report.cmd import render_report, write_report
from loadgen.run_manifest import write_manifest

from support.run_fixtures import manifest, sample, stream, ticks, write_run


def ttft_streams():
    """Group g: TTFTs 1, 2, 3, 4, 10 s over two reps; a warmup (TTFT 100 s) and a whale-sized
    group h that must never be pooled with g."""
    out = [
        stream(f"g{i}", rep=i % 2, sent=20.0 * i, chunks=ticks(20.0 * i + t, 3, 0.5))
        for i, t in enumerate([1.0, 2.0, 3.0, 4.0, 10.0])
    ]
    out.append(stream("warm", sent=-200.0, chunks=[-100.0, -99.0], phase="warmup"))
    out.append(stream("h0", group="h", prompt=50000, sent=200.0, chunks=[230.0, 231.0]))
    return out


def test_an_answers_length_and_token_source_stand_on_the_streams_that_carry_tokens():
    # 2 ok streams of 8 usage tokens, 3 HTTP 500s of none (their count: their zero chunks):
    # the group read "tokens 0" and "mixed:chunk_count+usage_continuous".
    ok = [stream(f"ok{i}", sent=float(i), chunks=ticks(i + 0.5, 4, 0.01), tokens=[2] * 4)
          for i in range(2)]  # fmt: skip
    failed = [replace(stream(f"e{i}", sent=float(i), chunks=[], token_source="chunk_count"),
                      status="error", error=StreamError("http_500", "boom"))
              for i in range(3)]  # fmt: skip
    summary = analyze(RunInputs(manifest(), [*ok, *failed], [])).summary
    g = summary["groups"]["g"]
    assert (g["n"], g["ok"], g["completion_tokens"]["n"]) == (5, 2, 2)
    assert g["completion_tokens"]["median"] == 8 and g["token_source"] == "usage_continuous"
    assert summary["run"]["token_sources"] == ["usage_continuous"]
    # A failed stream that delivered tokens counts its source: the mix is said.
    cut = replace(failed[0], completion_tokens=3, chunks=3)
    g = analyze(RunInputs(manifest(), [*ok, cut], [])).summary["groups"]["g"]
    assert g["token_source"] == "mixed:chunk_count+usage_continuous"


def test_group_statistics_are_exact_and_measure_phase_only():
    summary = analyze(RunInputs(manifest(), ttft_streams(), [])).summary
    g = summary["groups"]["g"]
    assert g["n"] == 5 and g["reps"] == 2
    # Linear interpolation between ranks: p90 at rank 3.6 = 4 + 0.6 * 6; p99 at 3.96.
    assert g["ttft_s"] == {
        "n": 5,
        "min": 1.0,
        "median": 3.0,
        "max": 10.0,
        "mean": 4.0,
        "p50": 3.0,
        "p90": pytest.approx(7.6),
        "p99": pytest.approx(9.76),
    }
    assert g["decode_tok_s"]["median"] == pytest.approx(2.0)
    # Rep 0 has g0, g2, g4 (TTFT 1, 3, 10): median 3; rep 1 has 2 and 4: median 3.
    assert g["rep_medians"]["ttft_s"] == [3.0, 3.0]
    assert g["rep_spread"]["ttft_s"] == 0.0
    assert summary["groups"]["h"]["ttft_s"]["median"] == 30.0
    assert summary["run"]["streams"]["by_phase"] == {"measure": 6, "warmup": 1}
    reps = {(r["group"], r["rep"]): r for r in summary["reps"]}
    assert reps[("g", 1)]["ttft_s"]["median"] == 3.0
    assert reps[("g", 0)]["wall_s"] == pytest.approx(91.001)


def test_summary_field_names(tmp_path: Path):
    run = write_run(tmp_path / "run", ttft_streams(), [sample(0, running=1, kv=0.1)])
    write_report(run)
    summary = orjson.loads((run / "summary.json").read_bytes())
    assert {"streams", "groups", "reps", "arms", "run"} <= set(summary)
    assert {"scenario", "target", "interrupted", "client_limited"} <= set(summary["run"])
    s = summary["streams"][0]
    for key in (
        "id", "group", "rep", "ttft_s", "decode_tok_s", "completion_tokens", "chunks",
        "token_source", "verdict", "evidence", "ttft_intended_s", "queue_wait_s", "tpot_s",
        "itl_chunk_ms", "itl_token_ms", "e2e_s", "tokens_per_chunk",
    ):  # fmt: skip
        assert key in s, key
    assert (run / "report.txt").read_text().startswith("loadgen report: scenario test")
    assert sorted(p.name for p in (run / "hist").iterdir()) == sorted(summary["hist"]["files"])


def test_report_on_a_copied_run_reproduces_summary_byte_for_byte(tmp_path: Path):
    metrics = [
        sample(t / 4, running=2, waiting=1, kv=0.3 + t / 1000, gen=7 * t) for t in range(900)
    ]
    original = write_run(tmp_path / "original", ttft_streams(), metrics)
    write_report(original)  # what the engine does at the end of a run
    copy = tmp_path / "elsewhere" / "renamed"
    shutil.copytree(original, copy)
    (copy / "summary.json").unlink()
    shutil.rmtree(copy / "hist")
    result = CliRunner().invoke(main, ["report", str(copy)])
    assert result.exit_code == 0, result.output
    assert "Latency per group" in result.output
    for name in ("summary.json", "report.txt"):
        assert (copy / name).read_bytes() == (original / name).read_bytes(), name
    for hlog in (original / "hist").iterdir():
        assert (copy / "hist" / hlog.name).read_bytes() == hlog.read_bytes(), hlog.name


def test_partial_and_interrupted_runs_are_reported(tmp_path: Path):
    run = tmp_path / "partial"
    write_run(run, [stream("a", chunks=[0.1, 0.2])], run={"interrupted": True})
    text = render_report(run)
    assert "INTERRUPTED" in text
    (run / "run.json").unlink()
    write_report(run)
    summary = orjson.loads((run / "summary.json").read_bytes())
    assert summary["run"]["interrupted"] is False
    assert summary["run"]["speed"] == 1.0
    assert "no server metrics" in (run / "report.txt").read_text()


def test_out_of_range_values_are_reported(tmp_path: Path):
    run = write_run(tmp_path / "r", [stream("slow", chunks=[7200.0, 7200.5])])
    write_report(run)
    summary = orjson.loads((run / "summary.json").read_bytes())
    assert summary["hist"]["out_of_range"]["g"]["ttft_uncorrected"] == 1
    assert "not recorded" in (run / "report.txt").read_text()


def politeness_arm(root: Path, name: str, minnow_first: float, budget: int) -> None:
    w = stream("w", group="whale", prompt=60000, chunks=[60.0, *ticks(60.1, 10, 0.1)])
    minnows = [
        stream(
            f"m{i}", group="minnows", prompt=4000, sent=0.001, chunks=ticks(minnow_first, 20, 0.1)
        )
        for i in range(3)
    ]
    arm = {"name": name, "flags": {"max_num_batched_tokens": budget}, "settings": {}}
    write_run(root / "arms" / name, [w, *minnows], run=manifest(arm=arm))


def test_sweep_directory_reports_every_arm_and_the_politeness_table(tmp_path: Path):
    root = tmp_path / "sweep"
    politeness_arm(root, "b2048", 63.0, 2048)
    politeness_arm(root, "b512", 5.0, 512)
    arms = [{"name": "b2048", "flags": {"max_num_batched_tokens": 2048}, "settings": {}}]
    arms.append({"name": "b512", "flags": {"max_num_batched_tokens": 512}, "settings": {}})
    write_manifest(root, manifest(arms=arms))
    result = CliRunner().invoke(main, ["report", str(root)])
    assert result.exit_code == 0, result.output
    text = (root / "report.txt").read_text()
    assert "Politeness across arms" in text
    rows = [line.split() for line in text.splitlines() if line.startswith("b")]
    # Arms in the parent run.json's order, each named with its budget.
    assert rows == [
        ["b2048:", "max_num_batched_tokens=2048", "60.0", "63.0", "-", "(3", "queued)", "10.0",
         "64.9"],
        ["b512:", "max_num_batched_tokens=512", "60.0", "4.999", "10.0", "-", "61.0"],
    ]  # fmt: skip
    for arm in ("b2048", "b512"):
        assert (root / "arms" / arm / "summary.json").is_file()
    parent = orjson.loads((root / "summary.json").read_bytes())
    assert parent["arms"]["b512"]["row"]["minnow_decode_during_tok_s"]["median"] == 10.0
    row = from_json(MixedRow, parent["arms"]["b512"]["row"])
    assert to_json(row) == parent["arms"]["b512"]["row"] and row.minnow_ttft_s.n == 3
    assert "== arm b512: max_num_batched_tokens=512 ==" in text


def test_ladder_sweep_reports_one_row_per_arm(tmp_path: Path):
    root = tmp_path / "ladder"
    for n in (1, 2):
        recs = [stream(f"s{i}", group="streams", chunks=ticks(0.1, 11, 0.1)) for i in range(n)]
        arm = {"name": f"n{n}", "flags": {}, "settings": {"groups.streams.count": n}}
        write_run(root / "arms" / f"n{n}", recs, run=manifest(arm=arm))
    text = write_report(root)
    assert "Concurrency" in text
    lines = (root / "report.txt").read_text().splitlines()
    row = next(line for line in lines if line.startswith("n2:"))
    assert row.split()[:7] == ["n2:", "groups.streams.count=2", "2", "2", "10.0", "20.0", "-"]


@pytest.mark.parametrize("command", ["report", "compare"])
def test_not_a_run_directory_is_a_one_line_error(tmp_path: Path, command: str):
    (tmp_path / "empty").mkdir()
    args = [command, str(tmp_path / "empty")] + ([str(tmp_path)] if command == "compare" else [])
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    assert result.output.strip().count("\n") == 0
    assert "not a run directory, no streams.jsonl" in result.output
