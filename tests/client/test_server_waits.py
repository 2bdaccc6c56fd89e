"""A local server's wait for a core around each stream (client/hostload.py's ServerWait,
read by the client at the stream's send and first token; the analysis' stream_server_waits),
a term of the stream's error bound added to the client's own. A stream whose bound so passes
its tolerance is client_limited, named for it in its evidence and the banner; one whose
bound stays within it, or a run that read no server, is judged as before."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.analysis.inputs import read_manifest
from loadgen.analysis.selferror import (
    ClientLimits,
    client_error_evidence,
    error_bound_s,
    server_waited,
    stream_server_waits,
)
from loadgen.analysis.summary import analyze_run
from loadgen.client.hostload import ServerWait
from loadgen.client.openai import OpenAIClient
from loadgen.codec import to_json
from loadgen.records import read_streams
from loadgen.report.banners import client_reasons
from loadgen.report.cmd import write_report
from loadgen.request import StreamRequest

from support.cli import loadgen
from support.pacedserver import PacedConfig, PacedServer
from support.run_fixtures import manifest, stream, write_run
from support.server_process import sim_process

MS = 1_000_000


def test_a_servers_wait_is_its_processes_main_threads_read_in_place() -> None:
    # A child's count is its schedstat's second field, read in place: between the field's
    # reads before and after; a server of two processes sums them (the second, a pid with
    # no process, 0); the child once gone, 0.
    kid = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    schedstat = Path(f"/proc/{kid.pid}/schedstat")
    try:
        wait = ServerWait([kid.pid, dead.pid])
        before = int(schedstat.read_bytes().split()[1])
        now = wait()
        after = int(schedstat.read_bytes().split()[1])
    finally:
        kid.kill()
        kid.wait()
    assert before <= now <= after
    assert wait() == 0
    wait.close()
    assert ServerWait([])() == 0


class _Reads:
    """A server's wait for a core as a client reads it: each read the next count given."""

    def __init__(self, *counts: int) -> None:
        self._counts = iter(counts)
        self.closed = False

    def __call__(self) -> int:
        return next(self._counts)

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("raw", [True, False], ids=["rawhttp", "aiohttp"])
async def test_a_stream_is_charged_its_servers_wait_from_its_send_to_its_first_token(
    raw: bool,
) -> None:
    # Read at each send and first content chunk, two reads a stream: the first stream's server
    # waited 3 ms in between; the second's count fell (a server process gone takes its count
    # with it): 0, never below. The client closes what it read through.
    async with (
        PacedServer(PacedConfig(ttft_s=0.0, gap_s=0.0)) as srv,
        OpenAIClient(srv.url, concurrency=1, raw_stream=raw) as client,
    ):
        reads = client.server_wait = _Reads(2 * MS, 5 * MS, 7 * MS, 0)
        one = await client.stream(StreamRequest(id="a", model="m", prompt="p", max_tokens=4))
        two = await client.stream(StreamRequest(id="b", model="m", prompt="p", max_tokens=4))
    assert (one.status, two.status) == ("ok", "ok")
    assert (one.server_wait_ns, two.server_wait_ns) == (3 * MS, 0)
    assert reads.closed


# run.json's client.host_cpu: loadgen's processes the host's main load, or the server's.
LOADGEN_BUSY = {"span_s": 1.0, "host_busy_cores": 1.3, "client_cores": 1.0, "cores": 2}
SERVER_BUSY = {"span_s": 1.0, "host_busy_cores": 1.9, "client_cores": 0.3, "cores": 2}


def _sent(
    at_ms: float,
    ttft_ms: float = 2.0,
    replica: int = 0,
    id: str = "s",
    wait_ms: float | None = None,
):
    rec = stream(
        id, sent=at_ms / 1e3, chunks=[(at_ms + ttft_ms) / 1e3, (at_ms + ttft_ms + 1) / 1e3]
    )
    waited = None if wait_ms is None else round(wait_ms * MS)
    return dataclasses.replace(rec, replica=replica, loop_lag_ttft_ns=0, server_wait_ns=waited)


def test_a_streams_server_wait_is_the_one_its_client_read() -> None:
    recs = [
        _sent(39, id="over", wait_ms=1.5),
        _sent(43, id="after", wait_ms=0),
        _sent(39, replica=1, id="other", wait_ms=0.2),
        _sent(99, id="elsewhere"),  # its server not on this host: none read
    ]
    waits = stream_server_waits(recs, LOADGEN_BUSY)
    assert waits == {"over": 3 * MS // 2, "after": 0, "other": MS // 5}
    # A server that kept the host busy by itself (loadgen under half of the busy cores), or a
    # run that measured nothing of its host: its waits are its own latency, none is charged.
    assert stream_server_waits(recs, SERVER_BUSY) == {}
    assert stream_server_waits(recs, {}) == {}


def test_a_server_that_waited_past_the_tolerance_makes_the_stream_client_limited() -> None:
    rec = _sent(39)  # TTFT 2 ms: its tolerance the 1 ms floor
    assert error_bound_s(rec, 3 * MS // 2) == pytest.approx(1.5e-3)
    own = client_error_evidence(rec, 3 * MS // 2)
    assert own is not None and own["server_wait_s"] == pytest.approx(1.5e-3)
    assert own["reason"].startswith("its server, on this host, waited for a core 1.5 ms")
    # Less than its tolerance, or no server read: nothing to flag.
    assert client_error_evidence(rec, MS // 2) is None
    assert client_error_evidence(rec) is None and client_error_evidence(rec, None) is None
    # Its own stamps' error and the wait add (the server's wait delays the bytes, the loop's
    # lag their read): 0.6 + 0.5 ms is past the 1 ms tolerance though neither is alone.
    lagged = dataclasses.replace(rec, loop_lag_ttft_ns=6 * MS // 10)
    assert error_bound_s(lagged, MS // 2) == pytest.approx(1.1e-3)
    own = client_error_evidence(lagged, MS // 2)
    assert own is not None and own["reason"].startswith(
        "loadgen's own timing error 0.6 ms and its server's wait for a core on this host 0.5 ms:"
        " 1.1 ms > tolerance 1.0 ms"
    )
    assert own["server_wait_s"] == pytest.approx(0.5e-3)
    assert client_error_evidence(lagged, 4 * MS // 10) is None  # 1.0 ms: within it
    assert client_error_evidence(lagged) is None
    # Its own error alone past it, with no wait read: named as loadgen's alone.
    late = dataclasses.replace(rec, loop_lag_ttft_ns=3 * MS)
    own = client_error_evidence(late, 0)
    assert own is not None and own["reason"].startswith("loadgen's own timing error 3.0 ms >")
    assert own["server_wait_s"] == 0


def test_the_count_of_streams_whose_server_waited_and_its_banner_line() -> None:
    recs = [_sent(39, id="a"), _sent(43, id="b"), _sent(10, ttft_ms=40, id="c")]
    # c: 40 ms TTFT, tolerance 2 ms; its 1.5 ms is within it.
    waits = {"a": 3 * MS // 2, "b": 0, "c": 3 * MS // 2}
    assert server_waited(recs, waits) == 1
    assert server_waited(recs, {}) == 0
    reasons = client_reasons(ClientLimits(3, 1, server_waited=1))
    assert reasons == [
        "1 of 3 streams had their server, on this host, wait for a core longer than their "
        "tolerance between their send and first token (the kernel's count): time it lost to "
        "this host's other processes, loadgen's among them, sits inside their TTFT"
    ]
    assert client_reasons(ClientLimits(3, 1)) == []
    # summary.json keeps the count only where there is one.
    assert "server_waited" not in to_json(ClientLimits(3))
    assert to_json(ClientLimits(3, 1, server_waited=1))["server_waited"] == 1


def test_a_run_with_its_servers_reads_flags_the_stream_whose_server_waited(
    tmp_path: Path,
) -> None:
    recs = [_sent(39, id="over", wait_ms=1.5), _sent(43, id="after", wait_ms=0)]
    client = {"loop_lag_max_ms": 1.0, "host_cpu": LOADGEN_BUSY}
    run = write_run(tmp_path / "run", recs, run=manifest(client=client))
    summary = analyze_run(run).summary
    over, after = _own(summary, "over"), _own(summary, "after")
    # Flagged, as client_limited or beside the server verdict that outweighed it.
    assert over is not None and over["server_wait_s"] == pytest.approx(1.5e-3)
    assert over["reason"].startswith("its server, on this host, waited for a core 1.5 ms")
    assert after is None
    counts = summary["run"]["records"]
    assert counts["limited"] + counts["beyond_tolerance"] == 1
    assert summary["run"]["client_limits"]["server_waited"] == 1
    assert "1 of 2 streams had their server, on this host, wait for a core" in _report(run)
    # The same run with its server elsewhere: judged as before, no word of a server's wait.
    elsewhere = [dataclasses.replace(r, server_wait_ns=None) for r in recs]
    run = write_run(tmp_path / "elsewhere", elsewhere, run=manifest(client=client))
    summary = analyze_run(run).summary
    assert _own(summary, "over") is None and _own(summary, "after") is None
    assert "server_waited" not in summary["run"]["client_limits"]
    assert "wait for a core" not in _report(run)


def _report(run: Path) -> str:
    """The report as the terminal shows it, its lines joined (a banner wraps)."""
    return " ".join(write_report(run).split())


def _own(summary: dict, id: str) -> dict | None:
    """The evidence of a stream's own timing error in a summary: a client_limited verdict's,
    or the one its server verdict outweighed; None where it had none."""
    (row,) = [s for s in summary["streams"] if s["id"] == id]
    ev = row["evidence"]
    return ev if row["verdict"] == "client_limited" else ev.get("client_error")


def test_a_run_against_a_server_on_this_host_reads_its_waits(tmp_path: Path) -> None:
    # `loadgen sim` in a process of its own on 127.0.0.1: each stream's client reads its wait
    # for a core at the send and the first token, through worker processes as in one.
    with sim_process(tmp_path / "sim.log", "--profile", "tiny") as (_, url):
        for workers in ("1", "2"):
            done = loadgen("request", "--base-url", url, "-n", "20", "-c", "4", "--max-tokens",
                           "8", "--prompt-tokens", "8", "--workers", workers, "--out",
                           tmp_path / workers)  # fmt: skip
            assert done.returncode == 0, done.stderr
            recs = read_streams(tmp_path / workers)
            assert len(recs) == 20 and all(r.t_first_ns is not None for r in recs)
            assert all(r.server_wait_ns is not None and r.server_wait_ns >= 0 for r in recs)
            assert "host_cpu" in (read_manifest(tmp_path / workers).client or {})
    # The virtual clock serves no HTTP: no server process, nothing read.
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(TINY)
    virtual = loadgen("run", scenario, "--clock", "virtual", "--out", tmp_path / "virtual")
    assert virtual.returncode == 0, virtual.stderr
    (run_dir,) = list((tmp_path / "virtual").iterdir())
    recs = read_streams(run_dir)
    assert recs and all(r.server_wait_ns is None for r in recs)


TINY = """
name: tiny
seed: 1
api: completions
groups:
  - name: g
    count: 4
    prompt: {tokens: 16}
    max_tokens: 8
"""
