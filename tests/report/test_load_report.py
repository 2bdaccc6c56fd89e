"""A load sweep's report end to end (`loadgen run --concurrency` on the virtual clock): the load
table, load.png and pareto.png, none of them for a sweep that is not over a load, and
`loadgen export`'s CSV files."""

from __future__ import annotations

import base64
import csv
import shutil
from pathlib import Path

import orjson
import pytest

from loadgen.analysis.load_sweep import LOAD_ROW_FIELDS
from loadgen.report.export import STREAM_COLUMNS

from support.cli import assert_one_line_error, loadgen

PNG = b"\x89PNG\r\n\x1a\n"
ARMS = ["concurrency=1", "concurrency=2", "concurrency=4"]
REQUESTS = 8
# The smoke scenario's arms on the virtual clock at seed 7: exact, the same on every machine.
LOAD_ROWS = [
    # c=1's and c=2's only edges, 499 and 497 against 494 tok/s per user, are within 1%: no mark.
    ["1", "8/0", "49.45", "495", "2.10/2.51", "2.00/2.00", "49.45", "100.0", "499"],
    ["2", "8/0", "91.15", "912", "3.31/4.61", "2.01/2.02", "91.15", "100.0", "497"],
    ["4", "8/0", "143.46", "1435", "4.80/6.62", "2.02/2.07", "71.73", "50.0", "494", "*"],
]


def _run(out: Path, *args: str) -> Path:
    proc = loadgen("run", *args, "--clock", "virtual", "--seed", "7", "--no-progress",
                   "--out", out)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = out.iterdir()
    return run_dir


@pytest.fixture(scope="module")
def load_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("load")
    return _run(out, "smoke", "--concurrency", "1,2,4", "--requests", str(REQUESTS),
                "--slo", "ttft=0.005,tpot=2.05")  # fmt: skip


@pytest.fixture(scope="module")
def ladder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _run(tmp_path_factory.mktemp("ladder"), "ladder", "--set", "repetitions=1")


def _table(text: str, title: str, n: int) -> list[list[str]]:
    """The `n` rows of the plain-text table titled `title`, cells split on whitespace; its
    notes follow them."""
    lines = text.splitlines()
    start = lines.index(title) + 3  # title, column names, rule
    assert lines[start + n].startswith("  concurrency: seats of a closed loop")
    return [line.split() for line in lines[start : start + n]]


def _arm_total(run_dir: Path, arm: str) -> dict:
    summary = orjson.loads((run_dir / "arms" / arm / "summary.json").read_bytes())
    return summary["benchmark"]["total"]


def test_the_load_table_has_a_row_per_load_value(load_sweep: Path) -> None:
    text = (load_sweep / "report.txt").read_text()
    rows = _table(text, "Load sweep over concurrency (measure phase, all groups)", len(ARMS))
    assert rows == LOAD_ROWS
    # The same figures as each arm's own benchmark block, not a second computation of them.
    for row, arm in zip(rows, ARMS, strict=True):
        total = _arm_total(load_sweep, arm)
        assert row[1] == f"{total['requests_ok']}/{total['requests_failed']}"
        assert row[2] == f"{total['request_per_s']:.2f}"
        assert row[4] == f"{total['ttft_ms']['median']:.2f}/{total['ttft_ms']['p90']:.2f}"
    summary = orjson.loads((load_sweep / "summary.json").read_bytes())
    assert summary["load"]["axis"] == "concurrency" and summary["load"]["values"] == [1, 2, 4]
    assert summary["load"]["pareto"] == [a for a, r in zip(ARMS, rows, strict=True) if r[-1] == "*"]
    for note in ("tok/s per user: median over ok streams", "1/TPOT", "Pareto *",
                 "output tokens from usage_continuous", "ttft_s <= 0.005"):  # fmt: skip
        assert note in text


def test_the_load_figures_are_written_and_embedded(load_sweep: Path) -> None:
    html = (load_sweep / "report.html").read_text()
    assert "Load sweep over concurrency" in html and "<h2>Load sweep</h2>" in html
    for name in ("load.png", "pareto.png"):
        png = (load_sweep / name).read_bytes()
        assert png.startswith(PNG)
        assert base64.b64encode(png).decode() in html


def test_a_sweep_that_is_not_over_a_load_has_no_load_table_or_figures(ladder: Path) -> None:
    text = (ladder / "report.txt").read_text()
    assert "Concurrency (cohort" in text and "Load sweep" not in text
    assert not (ladder / "load.png").exists() and not (ladder / "pareto.png").exists()
    assert "Load sweep" not in (ladder / "report.html").read_text()
    summary = orjson.loads((ladder / "summary.json").read_bytes())
    assert "load" not in summary
    # Its arms still carry their load rows (arms.csv exports them).
    assert summary["arms"]["groups.streams.count=8"]["load_row"]["requests_ok"] == 8


def _csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def test_export_writes_one_stream_row_per_measured_stream_and_one_arm_row_per_arm(
    load_sweep: Path, tmp_path: Path
) -> None:
    proc = loadgen("export", load_sweep, "--out", tmp_path / "csv")
    assert proc.returncode == 0, proc.stderr
    streams, arms = tmp_path / "csv" / "streams.csv", tmp_path / "csv" / "arms.csv"
    assert proc.stdout.splitlines() == [str(streams), str(arms)]
    head, rows = _csv(streams)
    assert head == list(STREAM_COLUMNS)
    assert len(rows) == len(ARMS) * REQUESTS
    assert [r["arm"] for r in rows] == [a for a in ARMS for _ in range(REQUESTS)]
    assert {r["status"] for r in rows} == {"ok"} and {r["token_source"] for r in rows} == {
        "usage_continuous"
    }
    head, rows = _csv(arms)
    assert head == ["arm", "concurrency", *LOAD_ROW_FIELDS, "pareto"]
    assert [(r["arm"], r["concurrency"], r["pareto"]) for r in rows] == [
        (a, a.split("=")[1], str(a == "concurrency=4")) for a in ARMS
    ]
    assert [float(r["request_per_s"]) for r in rows] == [
        _arm_total(load_sweep, a)["request_per_s"] for a in ARMS
    ]


def test_export_of_a_non_load_sweep_and_of_one_arm(ladder: Path, tmp_path: Path) -> None:
    assert loadgen("export", ladder, "--out", tmp_path / "ladder").returncode == 0
    head, rows = _csv(tmp_path / "ladder" / "arms.csv")
    assert head[:2] == ["arm", "groups.streams.count"]
    assert [r["groups.streams.count"] for r in rows] == ["1", "2", "4", "8"]
    assert {r["pareto"] for r in rows} == {""}  # no frontier outside a load sweep
    _, streams = _csv(tmp_path / "ladder" / "streams.csv")
    assert len(streams) == 1 + 2 + 4 + 8
    # One run directory (an arm): streams.csv only, into the run directory by default.
    arm = ladder / "arms" / "groups.streams.count=4"
    proc = loadgen("export", arm)
    assert proc.returncode == 0 and proc.stdout.splitlines() == [str(arm / "streams.csv")]
    assert len(_csv(arm / "streams.csv")[1]) == 4 and not (arm / "arms.csv").exists()


def test_a_finished_sweep_of_engines_per_arm_says_it_finished(ladder: Path) -> None:
    # Its parent never said: `fidelity --measured` refused every finished virtual or URL
    # sweep as "did not finish (run.json interrupted: None)".
    assert orjson.loads((ladder / "run.json").read_bytes())["interrupted"] is False


def test_export_says_the_records_a_run_directory_lost(ladder: Path, tmp_path: Path) -> None:
    arm = tmp_path / "arm"
    shutil.copytree(ladder / "arms" / "groups.streams.count=4", arm)
    proc = loadgen("export", arm)
    assert proc.returncode == 0 and proc.stderr == ""
    # A torn last line: 3 rows, and the lost stream said (it was written silently).
    streams = arm / "streams.jsonl"
    streams.write_bytes(streams.read_bytes()[:-40])
    proc = loadgen("export", arm)
    assert proc.returncode == 0 and len(_csv(arm / "streams.csv")[1]) == 3
    assert proc.stderr.splitlines() == [
        "!! MISSING: 1 planned streams have no record (the run was stopped before sending them, "
        "or their lines were lost)",
        "!! TORN: 1 line(s) of streams.jsonl could not be read",
    ]


def test_export_of_a_path_that_is_no_run_directory_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    line = assert_one_line_error(loadgen("export", missing))
    assert str(missing) in line and "pass a directory `loadgen run` wrote" in line
    (tmp_path / "empty").mkdir()
    assert "not a run directory" in assert_one_line_error(loadgen("export", tmp_path / "empty"))


@pytest.fixture(scope="module")
def deep_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _run(tmp_path_factory.mktemp("deep"), "deep_decode", "--concurrency", "1,2",
                "--requests", "4", "--set", "repetitions=1")  # fmt: skip


def test_a_concurrency_sweeps_cohort_says_its_streams_and_how_many_decoded_at_once(
    deep_sweep: Path,
) -> None:
    summary = orjson.loads((deep_sweep / "summary.json").read_bytes())
    cohorts = {a: summary["arms"][a]["groups"]["deep"]["cohort"] for a in ARMS[:2]}
    # 4 streams per rep through 1 and 2 seats: the rep is not the concurrency.
    assert [(c["n"], c["peak_decoding"]) for c in cohorts.values()] == [(4, 1), (4, 2)]
    one = cohorts["concurrency=1"]
    # One seat: the aggregate is the per-stream rate, same tokens over the same decode time
    # (it read 348 beside 723 when its window held every later stream's prefill).
    assert one["agg_tok_s"] == pytest.approx(one["per_stream_tok_s"], rel=1e-12)
    two = cohorts["concurrency=2"]
    assert one["per_stream_tok_s"] < two["agg_tok_s"] <= 2 * two["per_stream_tok_s"]
    text = (deep_sweep / "report.txt").read_text()
    assert "streams/rep  peak decoding  per-stream  decode agg" in text


def _last_table_title(shown: str) -> str:
    """The title of the last table the terminal printed: the line before its top border."""
    lines = shown.splitlines()
    top = max(i for i, line in enumerate(lines) if line.startswith("┏"))
    return lines[top - 1].strip()


def test_the_terminal_ends_on_the_load_table_and_keeps_the_arms_tables_behind_a_flag(
    load_sweep: Path,
) -> None:
    proc = loadgen("report", load_sweep)
    assert proc.returncode == 0, proc.stderr
    short = proc.stdout
    assert _last_table_title(short) == "Load sweep over concurrency (measure phase, all groups)"
    assert "arm concurrency=1 |" not in short
    assert "each arm's own tables: report.txt, or --arm-tables to print them" in short
    # report.txt keeps every arm's tables.
    assert "== arm concurrency=1 ==" in (load_sweep / "report.txt").read_text()
    full = loadgen("report", load_sweep, "--arm-tables")
    assert full.returncode == 0, full.stderr
    assert [f"arm {a} | Latency per group" in full.stdout for a in ARMS] == [True] * len(ARMS)
    assert _last_table_title(full.stdout) == _last_table_title(short)
    assert "--arm-tables to print them" not in full.stdout
    # The measure of the scroll: the arms' tables are most of the lines.
    assert len(full.stdout.splitlines()) > 4 * len(short.splitlines())
