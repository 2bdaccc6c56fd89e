"""Corrupt or partial run directories (issue #20): `report` and `compare` skip and count what
they cannot read, report the rest, and never show a traceback."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import orjson
import pytest

from loadgen.analysis.inputs import load_run, read_manifest
from loadgen.codec import to_json
from loadgen.records import (
    MetricsSample,
    StreamError,
    StreamRecord,
    read_metrics_sample,
    read_records,
    read_stream,
)

from support.cli import assert_one_line_error, loadgen


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    proc = loadgen("run", "smoke", "--clock", "virtual", "--seed", "1", "--out", out,
                   "--no-progress")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = out.iterdir()
    return run_dir


@pytest.fixture
def run_copy(smoke_run: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(smoke_run, copy)
    return copy


def _insert_line(path: Path, line: bytes, at: int = 1) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join([*lines[:at], line + b"\n", *lines[at:]]))


def _retype(path: Path, index: int, **fields: object) -> None:
    lines = path.read_bytes().splitlines()
    obj = orjson.loads(lines[index]) | fields
    lines[index] = orjson.dumps(obj)
    path.write_bytes(b"\n".join(lines) + b"\n")


def _report(run_dir: Path) -> str:
    proc = loadgen("report", run_dir, timeout_s=60)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("line", [b"[1,2,3]", b"null", b"7", b'"text"', b"{not json"])
def test_a_line_that_is_not_a_record_is_skipped_and_counted(run_copy: Path, line: bytes) -> None:
    _insert_line(run_copy / "streams.jsonl", line)
    out = _report(run_copy)
    assert "records: 4 measured of 4 planned" in out  # every real record still read
    assert "!! TORN: 1 line(s) of streams.jsonl could not be read" in out


def test_a_record_with_a_wrongly_typed_field_is_skipped_and_counted(run_copy: Path) -> None:
    _retype(run_copy / "streams.jsonl", 0, t_sent_ns="abc")
    _retype(run_copy / "streams.jsonl", 1, chunk_ns=[1, "x"])
    out = _report(run_copy)
    assert "records: 2 measured of 4 planned" in out
    assert "!! TORN: 2 line(s) of streams.jsonl could not be read" in out


def test_a_clean_run_reports_no_skipped_line(smoke_run: Path, run_copy: Path) -> None:
    out = _report(run_copy)
    assert "records: 4 measured of 4 planned" in out and "!!" not in out
    inputs = load_run(smoke_run)
    assert (inputs.unreadable_streams, inputs.unreadable_metrics, inputs.dropped_fields,
            inputs.repeated_streams) == (0, 0, (), 0)  # fmt: skip


def test_a_stream_recorded_twice_counts_once_and_is_said(run_copy: Path) -> None:
    # A line repeated read as a fifth stream: "5 measured of 4 planned", its tokens twice.
    streams = run_copy / "streams.jsonl"
    first = streams.read_bytes().splitlines()[0]
    _insert_line(streams, orjson.dumps(orjson.loads(first) | {"completion_tokens": 1}), at=3)
    inputs = load_run(run_copy)
    assert inputs.repeated_streams == 1 and len(inputs.streams) == 4
    assert inputs.streams[0] == read_stream(orjson.loads(first))  # the first record is kept
    out = _report(run_copy)
    assert "records: 4 measured of 4 planned" in out
    assert "!! REPEATED: 1 line(s) of streams.jsonl repeat a stream id read before" in out


def test_a_bad_metrics_line_is_skipped_and_counted(run_copy: Path) -> None:
    metrics = run_copy / "metrics.jsonl"
    good = len(load_run(run_copy).metrics)
    _insert_line(metrics, b"[1]")
    _insert_line(metrics, b'{"t_ns": "x", "values": {}}')
    _insert_line(metrics, b'{"t_ns": 5, "values": {"kv_cache_usage_perc": "high"}}')
    assert len(load_run(run_copy).metrics) == good
    out = _report(run_copy)
    assert "!! TORN: 3 line(s) of metrics.jsonl could not be read" in out


def test_a_wrongly_typed_run_json_field_is_dropped_with_a_note(run_copy: Path) -> None:
    manifest = orjson.loads((run_copy / "run.json").read_bytes())
    manifest |= {"planned_streams": "many", "scenario": 5, "seed": True, "client": [1]}
    (run_copy / "run.json").write_bytes(orjson.dumps(manifest))
    kept = read_manifest(run_copy)
    assert (kept.planned_streams, kept.scenario, kept.seed, kept.client) == (None,) * 4
    assert kept.clock == "virtual" and kept.model == "loadgen-sim"  # the well-typed fields stay
    out = _report(run_copy)
    assert "records: 4 measured of - planned" in out
    assert (
        "!! run.json: ignored field(s) of the wrong type: client (expected object, got list), "
        "planned_streams (expected int, got str), scenario (expected object, got int), seed "
        "(expected int, got bool)"
    ) in " ".join(out.split())


def test_a_clock_loadgen_does_not_know_is_dropped_with_a_note(run_copy: Path) -> None:
    """The clock is a ClockName from the run.json on: a word outside it is ignored like a wrong
    type, not carried into the report as a ValueError."""
    manifest = orjson.loads((run_copy / "run.json").read_bytes())
    (run_copy / "run.json").write_bytes(orjson.dumps(manifest | {"clock": "sundial"}))
    assert read_manifest(run_copy).clock == "wall"  # as a run.json without one reads
    out = " ".join(_report(run_copy).split())
    assert "ignored field(s) of the wrong type: clock (expected a ClockName, got 'sundial')" in out


def test_a_wrong_value_inside_a_typed_field_drops_that_field(run_copy: Path) -> None:
    manifest = orjson.loads((run_copy / "run.json").read_bytes())
    (run_copy / "run.json").write_bytes(orjson.dumps(manifest | {"cache_checks": [5]}))
    assert read_manifest(run_copy).cache_checks is None
    out = " ".join(_report(run_copy).split())
    assert "ignored field(s) of the wrong type: cache_checks ([0]: expected object, got int)" in out


def test_a_deeper_wrong_shape_in_run_json_is_one_line(run_copy: Path) -> None:
    manifest = orjson.loads((run_copy / "run.json").read_bytes())
    scenario = manifest["scenario"] | {"groups": 5}  # a JSON object the scenario's reader walks
    (run_copy / "run.json").write_bytes(orjson.dumps(manifest | {"scenario": scenario}))
    line = assert_one_line_error(loadgen("report", run_copy, timeout_s=60))
    assert line.startswith(f"Error: {run_copy}: a field of run.json has an unexpected shape (")


def test_hist_as_a_file_still_reports_the_rest(run_copy: Path) -> None:
    shutil.rmtree(run_copy / "hist")
    (run_copy / "hist").write_text("not a folder")
    (run_copy / "summary.json").unlink()
    proc = loadgen("report", run_copy, timeout_s=60)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert f"warning: {run_copy / 'hist'} is not a folder; histogram logs not written" in (
        proc.stderr
    )
    assert (run_copy / "summary.json").is_file()


def test_a_sweep_whose_arm_has_a_bad_line_reports_every_arm(tmp_path: Path) -> None:
    proc = loadgen("run", "politeness", "--clock", "virtual", "--seed", "1", "--out", tmp_path,
                   "--no-progress", timeout_s=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (sweep,) = tmp_path.iterdir()
    arms = sorted((sweep / "arms").iterdir())
    _insert_line(arms[0] / "streams.jsonl", b"[1]")
    out = _report(sweep)
    assert f"arm {arms[0].name}: !! TORN: 1 line(s) of streams.jsonl could not be read" in out
    assert all(f"arm {a.name}: !!" not in out for a in arms[1:])
    compare = loadgen("compare", arms[0], arms[1], timeout_s=60)
    assert compare.returncode == 0 and "Traceback" not in compare.stderr, compare.stderr


def test_the_reader_counts_every_kind_of_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    good = orjson.dumps({"t_ns": 1, "values": {"x": 1.0}})
    path.write_bytes(b"\n".join([good, b"[1]", b"", b"null", b'{"t_ns": 2.5}', good, b'{"t_']))
    samples, bad = read_records(path, read_metrics_sample)
    assert samples == [MetricsSample(1, {"x": 1.0}), MetricsSample(1, {"x": 1.0})]
    assert bad == 4  # [1], null, a float t_ns, the torn last line; the blank line is no record
    assert read_records(tmp_path / "absent.jsonl", read_stream) == ([], 0)


def test_every_stored_field_of_a_record_is_read_back() -> None:
    # A value unlike its default in every field: a reader that drops one (the hand-kept table
    # once dropped rtt_us, response_id, the reasoning fields and cold) fails here.
    samples = {"int": 7, "str": "x", "bool": True, "list[int]": [1, 2], "Status": "error",
               "TokenSource": "usage_final"}  # fmt: skip
    values: dict[str, object] = {}
    for f in dataclasses.fields(StreamRecord):
        if f.name == "error" or f.name in ("answer", "calls"):  # calls, answer: never written
            continue
        first = next(p.strip() for p in f.type.split("|") if p.strip() != "None")
        values[f.name] = samples[first]
    record = StreamRecord(**values, error=StreamError("reset", "peer"))
    assert read_stream(orjson.loads(orjson.dumps(to_json(record)))) == record
    kept = dataclasses.replace(record, answer="text", calls=(("c1", "f", "{}"),))
    assert to_json(kept) == to_json(record)  # kept in memory for the next turn, never written
