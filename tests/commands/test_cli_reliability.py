"""The CLI under bad input and hostile targets (issue #10): one-line errors, exit codes, no
traceback, no half-written run directory, every run directory reportable."""

from __future__ import annotations

import errno
import socket
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

import loadgen.report.cmd as report_cmd
from loadgen.cli import main

from support.cli import assert_one_line_error, loadgen
from support.pacedserver import PacedConfig, ThreadedPacedServer
from support.paths import REPO
from support.run_fixtures import stream, write_run


def _refusing_port() -> socket.socket:
    """A loopback port that is bound but not listening: connecting to it is refused."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    return s


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("ftp://127.0.0.1:8000", "is not an http(s) URL"),
        ("http://", "is not an http(s) URL"),
        ("http://127.0.0.1:99999", "port out of range"),
        ("a-host-name-only:80:80", "is not"),
    ],
)
def test_run_refuses_a_bad_base_url_in_one_line(tmp_path: Path, url: str, words: str) -> None:
    out = tmp_path / "runs"
    proc = loadgen("run", "smoke", "--base-url", url, "--out", out, "--no-progress")
    line = assert_one_line_error(proc)
    assert words.lower() in line.lower()
    assert url in line
    assert not out.exists() or not any(out.iterdir())


def test_run_against_an_unreachable_port_fails_in_one_line_and_writes_nothing(
    tmp_path: Path,
) -> None:
    out = tmp_path / "runs"
    with _refusing_port() as s:
        port = s.getsockname()[1]
        for url in (f"127.0.0.1:{port}", f"http://127.0.0.1:{port}"):
            proc = loadgen("run", "smoke", "--base-url", url, "--out", out, "--no-progress")
            line = assert_one_line_error(proc)
            assert f"cannot connect to http://127.0.0.1:{port}: Connection refused" in line
    assert not out.exists() or not any(out.iterdir())


def test_run_with_an_unwritable_out_fails_in_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    proc = loadgen("run", "smoke", "--out", blocker / "runs", "--no-progress")
    line = assert_one_line_error(proc)
    assert f"--out {blocker / 'runs'}" in line
    assert "Not a directory" in line


def test_a_sim_that_cannot_boot_shows_why(tmp_path: Path) -> None:
    proc = loadgen(
        "run", "smoke", "--set", "sim.max_model_len=2000000000", "--out", tmp_path,
        "--no-progress",
    )  # fmt: skip
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert "exited with code 2 during boot" in proc.stderr
    # The reason is the sim's own last line, which used to be cut off.
    assert "does not fit the KV cache of 16384 tokens" in proc.stderr


def test_a_request_out_directory_is_a_run_directory(tmp_path: Path) -> None:
    out, runs = tmp_path / "probe", tmp_path / "runs"
    with ThreadedPacedServer(PacedConfig(ttft_s=0.0, gap_s=0.0)) as srv:
        proc = loadgen(
            "request", "--base-url", srv.url, "-n", "3", "--max-tokens", "4", "--out", out
        )
        ran = loadgen("run", "smoke", "--base-url", srv.url, "--out", runs, "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert ran.returncode == 0, ran.stderr
    (run_dir,) = runs.iterdir()
    # The run's layout, from the one arm driver: its files (request writes no report.txt of
    # its own) and run.json's keys, metrics polled like any run's.
    files = {"run.json", "streams.jsonl", "metrics.jsonl", "summary.json"}
    assert {p.name for p in out.iterdir()} == files
    assert files <= {p.name for p in run_dir.iterdir()}
    request_keys = set(orjson.loads((out / "run.json").read_bytes()))
    assert request_keys == set(orjson.loads((run_dir / "run.json").read_bytes()))
    # request's summary.json is the one `loadgen report` makes of the directory, byte for byte.
    said = (out / "summary.json").read_bytes()
    rep = loadgen("report", out)
    assert rep.returncode == 0, rep.stderr
    assert (out / "summary.json").read_bytes() == said
    assert "Traceback" not in rep.stderr
    assert f"scenario request | target {srv.url} (external)" in rep.stdout
    assert "records: 3 measured of 3 planned" in rep.stdout
    assert "prompt shape: request=prose" in rep.stdout
    assert "MISSING" not in rep.stdout
    for name in ("summary.json", "report.txt", "report.html"):
        assert (out / name).is_file()
    # Two request directories compare like two runs of one scenario: one group in common.
    cmp = loadgen("compare", out, out)
    assert cmp.returncode == 0, cmp.stderr
    assert "request │ median TTFT (s)" in cmp.stdout
    notes = " ".join(cmp.stdout.split())
    assert "; wall clock, external" in notes and "sim's error" not in notes  # one clock


def test_a_request_out_directory_takes_one_run(tmp_path: Path) -> None:
    # A second request into the same --out appended its streams to the first's: its report
    # said "16 of 3016 streams failed" after a run of 3,000, the 16 a stopped earlier run's.
    out = tmp_path / "probe"
    out.mkdir()  # an empty folder (mktemp -d's) is taken
    args = ("-n", "3", "--max-tokens", "4", "--out", out)
    with ThreadedPacedServer(PacedConfig(ttft_s=0.0, gap_s=0.0)) as srv:
        first = loadgen("request", "--base-url", srv.url, *args)
        assert first.returncode == 0, first.stderr
        streams = (out / "streams.jsonl").read_bytes()
        again = loadgen("request", "--base-url", srv.url, *args)
    line = assert_one_line_error(again)
    assert f"--out {out}: already holds files" in line and "name a new folder" in line
    assert (out / "streams.jsonl").read_bytes() == streams
    assert len(streams.splitlines()) == 3


def test_a_torn_streams_file_reports_measured_of_planned(tmp_path: Path) -> None:
    proc = loadgen("run", "smoke", "--out", tmp_path, "--no-progress")
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = tmp_path.iterdir()
    streams = run_dir / "streams.jsonl"
    lines = streams.read_bytes().splitlines(keepends=True)
    assert len(lines) == 4  # smoke plans 4 measured streams and nothing else
    streams.write_bytes(b"".join(lines[:2]) + lines[2][:20])  # a crash mid-write
    rep = loadgen("report", run_dir)
    assert rep.returncode == 0, rep.stderr
    assert "records: 2 measured of 4 planned" in rep.stdout
    assert "!! MISSING: 2 planned streams have no record" in rep.stdout
    assert "!! TORN: 1 line(s) of streams.jsonl could not be read" in rep.stdout


def test_run_exits_4_with_a_summary_when_measured_streams_failed(tmp_path: Path) -> None:
    failing = PacedConfig(ttft_s=0.0, gap_s=0.0, faults=dict.fromkeys(range(4), "http_500"))
    with ThreadedPacedServer(failing) as srv:
        proc = loadgen("run", "smoke", "--base-url", srv.url, "--out", tmp_path, "--no-progress")
    assert proc.returncode == 4, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "Error: 4 of 4 streams failed: http_500 x4" in proc.stderr


def test_compare_of_runs_with_no_group_in_common_fails_in_one_line(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", [stream("a0", chunks=[0.1, 0.2], group="whale")])
    b = write_run(tmp_path / "b", [stream("b0", chunks=[0.1, 0.2], group="minnow")])
    line = assert_one_line_error(loadgen("compare", a, b))
    assert f"no group in common: {a} has whale; {b} has minnow" in line


@pytest.mark.parametrize(
    ("rows", "words"),
    [
        ([0, -5, 10], ":2: negative timestamp"),
        ([0, 2000, 1000], ":3: timestamp earlier than the row before"),
    ],
)
def test_validate_refuses_a_trace_whose_times_run_backwards(
    tmp_path: Path, rows: list[int], words: str
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(
            orjson.dumps({"timestamp": t, "input_length": 64, "output_length": 4}).decode() + "\n"
            for t in rows
        )
    )
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "name: t\nseed: 1\narrival: {trace: {path: t.jsonl}}\n"
        "groups: [{name: g, prompt: {cache: salted}}]\n"
    )
    proc = loadgen("validate", scenario)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"{scenario}:3: arrival.trace.path: unreadable trace: {trace}{words}" in proc.stderr


def test_a_prompt_file_outside_the_scenario_folder_is_refused_unless_allowed(
    tmp_path: Path,
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("a private local file that must not be sent " * 20)
    folder = tmp_path / "shared"
    folder.mkdir()
    scenario = folder / "s.yaml"
    scenario.write_text(
        (REPO / "scenarios" / "smoke.yaml")
        .read_text()
        .replace("shape: code", f"shape: {{file: {secret}}}")
    )
    out = tmp_path / "runs"
    proc = loadgen("run", scenario, "--out", out, "--no-progress")
    line = assert_one_line_error(proc)
    assert f"{secret} is outside the scenario's folder {folder}" in line
    assert "--allow-files-outside" in line
    assert not out.exists()
    assert loadgen("validate", scenario).returncode == 1
    allowed = loadgen("validate", scenario, "--allow-files-outside")
    assert allowed.returncode == 0, allowed.stderr


def test_a_full_disk_while_writing_the_report_keeps_the_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(*_args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(report_cmd, "write_hlogs", full)
    out = tmp_path / "runs"
    result = CliRunner().invoke(main, ["run", "smoke", "--clock", "virtual", "--out", str(out),
                                       "--no-progress"])  # fmt: skip
    (run_dir,) = out.iterdir()
    assert result.exit_code == 5, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert errors == [
        f"Error: disk full writing the report of {run_dir}: its records are kept; free space, "
        f"then `loadgen report {run_dir}`"
    ]
    assert len((run_dir / "streams.jsonl").read_bytes().splitlines()) == 4
    assert not (run_dir / "report.txt").exists()
    # With room on the disk, the same run reports and exits 0.
    monkeypatch.undo()
    ok = CliRunner().invoke(main, ["run", "smoke", "--clock", "virtual", "--out",
                                   str(tmp_path / "ok"), "--no-progress"])  # fmt: skip
    assert ok.exit_code == 0, ok.output
    assert "disk full" not in ok.stderr


def test_a_ctrl_c_while_the_report_is_written_exits_130_with_the_records_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Outside a run's loop a Ctrl-C was click's "Aborted!" and exit 1, unlike a stopped run.
    def stopped(*_args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(report_cmd, "write_hlogs", stopped)
    out = tmp_path / "runs"
    result = CliRunner().invoke(main, ["run", "smoke", "--clock", "virtual", "--out", str(out),
                                       "--no-progress"])  # fmt: skip
    assert result.exit_code == 130, result.output
    assert result.stderr.splitlines()[-1] == "interrupted: records written so far are kept"
    assert "Aborted!" not in result.output
    (run_dir,) = out.iterdir()
    assert len((run_dir / "streams.jsonl").read_bytes().splitlines()) == 4
