"""Requests beside the streams are short and say what failed (issue 32): a server that accepts
and never answers fails a command on its own metadata timeout, naming the request; a --model
the server does not list is refused in one line before anything is sent, and a listed one
goes through."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from loadgen.client.endpoint import Timeouts
from loadgen.records import read_streams

from support.cli import assert_one_line_error, loadgen
from support.server_process import silent_server, sim_process


def test_probe_cache_against_a_silent_server_fails_on_the_metadata_timeout() -> None:
    with silent_server() as url:
        start = time.monotonic()
        # Before the metadata timeout, this took the idle timeout: 120 s.
        proc = loadgen("probe-cache", "--base-url", url, timeout_s=60)
        took = time.monotonic() - start
    line = assert_one_line_error(proc)
    assert f"GET /v1/models timed out after {Timeouts.meta_s} s" in line
    # The timeout plus interpreter start and imports on a busy 2-core box.
    assert Timeouts.meta_s is not None and Timeouts.meta_s <= took < Timeouts.meta_s + 20


@pytest.fixture(scope="module")
def sim_url(tmp_path_factory: pytest.TempPathFactory):
    with sim_process(tmp_path_factory.mktemp("sim") / "sim.log") as (_, url):
        yield url


REQUEST = ("request", "--count", "20", "--prompt-tokens", "32", "--max-tokens", "4")


def test_request_with_a_model_the_server_does_not_list_is_refused_in_one_line(
    sim_url: str, tmp_path: Path
) -> None:
    proc = loadgen(*REQUEST, "--base-url", sim_url, "--model", "no-such-model",
                   "--out", tmp_path / "req")  # fmt: skip
    line = assert_one_line_error(proc)
    assert line == (
        f"Error: model 'no-such-model' is not served by {sim_url}; it serves: loadgen-sim"
    )
    # The server's URL is taken out first: its random port may hold the digits (40465 did).
    assert "404" not in (proc.stdout + proc.stderr).replace(sim_url, "")
    streams = tmp_path / "req" / "streams.jsonl"
    assert not streams.exists() or not streams.read_text()


def test_run_and_soak_with_a_model_the_server_does_not_list_write_nothing(
    sim_url: str, tmp_path: Path
) -> None:
    for cmd in (("run", "smoke"), ("soak", "smoke", "--duration", "5s")):
        out = tmp_path / cmd[0]
        proc = loadgen(*cmd, "--base-url", sim_url, "--model", "no-such-model", "--out", out,
                       "--no-progress")  # fmt: skip
        line = assert_one_line_error(proc)
        assert "model 'no-such-model' is not served by" in line and "loadgen-sim" in line
        assert not out.exists() or not any(out.iterdir())


def test_a_listed_model_goes_through_quietly(sim_url: str, tmp_path: Path) -> None:
    proc = loadgen(*REQUEST, "--base-url", sim_url, "--model", "loadgen-sim")
    assert proc.returncode == 0, proc.stderr
    assert "not served" not in proc.stdout + proc.stderr
    proc = loadgen("run", "smoke", "--base-url", sim_url, "--model", "loadgen-sim", "--out",
                   tmp_path, "--no-progress")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = tmp_path.iterdir()
    recs = list(read_streams(run_dir))
    assert recs and all(r.status == "ok" for r in recs)
