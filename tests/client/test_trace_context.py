"""`--trace-context`: a W3C traceparent per request, recorded per stream and logged by the sim, so a
server's traces join loadgen's records; and none at all without the flag."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from loadgen.cli import main
from loadgen.records import read_streams
from loadgen.request import TRACEPARENT, new_traceparent

from support.cli import loadgen
from support.pacedserver import PacedConfig, ThreadedPacedServer

# The W3C grammar written out again, independently of loadgen.request's pattern.
W3C = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def test_fresh_traceparents_are_valid_and_unique():
    values = [new_traceparent() for _ in range(2000)]
    assert len(set(values)) == len(values)
    for value in values:
        match = W3C.match(value)
        assert match and int(match[1], 16) and int(match[2], 16)
        assert TRACEPARENT.fullmatch(value)


@pytest.mark.parametrize(
    "bad",
    [
        "00-" + "0" * 32 + "-00f067aa0ba902b7-01",  # all-zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0" * 16 + "-01",  # all-zero span id
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  # upper case
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",  # short trace id
    ],
)
def test_the_pattern_refuses_what_w3c_refuses(bad: str):
    assert not TRACEPARENT.fullmatch(bad)


def run_smoke(out: Path, *args: str) -> tuple[list[str | None], str]:
    """The measured streams' traceparents and the launched sim's log of a wall-clock smoke run."""
    proc = loadgen("run", "smoke", "--clock", "wall", "--no-progress", "--out", out, *args)
    assert proc.returncode == 0, proc.stderr
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    (log,) = run.glob("sim-*.log")
    return [r.traceparent for r in read_streams(run) if r.phase == "measure"], log.read_text()


def test_every_request_carries_its_own_and_the_sim_logs_it(tmp_path: Path):
    sent, log = run_smoke(tmp_path, "--trace-context")
    assert len(sent) == 4 and len(set(sent)) == 4
    for value in sent:
        assert value is not None and W3C.match(value)
        assert f"traceparent={value}" in log


def test_without_the_flag_no_header_is_sent_or_recorded(tmp_path: Path):
    sent, log = run_smoke(tmp_path)
    assert sent == [None] * 4
    assert "traceparent" not in log


def test_workers_send_it_too(tmp_path: Path):
    sent, log = run_smoke(tmp_path, "--trace-context", "--workers", "2")
    assert len(set(sent)) == 4
    assert all(v is not None and f"traceparent={v}" in log for v in sent)


def test_the_virtual_clock_refuses_it_in_one_line():
    proc = loadgen("run", "smoke", "--clock", "virtual", "--trace-context")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--trace-context adds an HTTP header" in proc.stderr


def test_a_request_run_carries_one_per_stream(tmp_path: Path):
    # request runs through the arm driver, so its streams are traced like a run's.
    with ThreadedPacedServer(PacedConfig(ttft_s=0.001, gap_s=0.001)) as srv:
        args = ["request", "--base-url", srv.url + "/v1", "--prompt-tokens", "20"]
        result = CliRunner().invoke(
            main, [*args, "-n", "3", "--trace-context", "--out", str(tmp_path / "r")]
        )
    assert result.exit_code == 0, result.output
    sent = [r.traceparent for r in read_streams(tmp_path / "r")]
    assert len(set(sent)) == 3 and all(v is not None and W3C.match(v) for v in sent)
