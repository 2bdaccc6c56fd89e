"""Faults: each is one stream's error record with its class; the run's other streams finish ok;
the CLI exits non-zero with a one-line summary and no traceback."""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import aiohttp
import pytest
from click.testing import CliRunner

from loadgen.cli import main
from loadgen.client.decode import StreamDecoder
from loadgen.client.endpoint import Timeouts
from loadgen.client.errors import ServerUnreachable, connect_reason
from loadgen.client.openai import OpenAIClient
from loadgen.commands.run import failure_summary
from loadgen.records import StreamError, StreamRecord, read_streams
from loadgen.request import StreamRequest

from support.pacedserver import PacedConfig, PacedServer, ThreadedPacedServer
from support.paths import REPO

FAST = PacedConfig(ttft_s=0.01, gap_s=0.005)


def req(i: int, fault: str | None = None, max_tokens: int = 8) -> StreamRequest:
    extra = {"fault": fault} if fault else {}
    return StreamRequest(
        id=f"s{i}", model="m", prompt=f"p {i}", max_tokens=max_tokens, extra_body=extra
    )


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    ("fault", "cls", "message"),
    [
        ("http_401", "http_401", "Invalid API key"),
        ("http_429", "http_429", "Too many requests"),
        ("http_500", "http_500", "Engine died"),
        ("close_mid", "connection_closed", "after 2 events"),
        ("bad_json", "malformed_sse", "invalid JSON in event 3"),
        ("stall", "idle_timeout", "no content for 0.3 s"),
        ("error_event", "server_error_event", "engine error mid-stream"),
    ],
)
async def test_a_fault_fails_its_own_stream_only(fault: str, cls: str, message: str) -> None:
    reqs = [req(0), req(1, fault), req(2), req(3)]
    async with (
        PacedServer(FAST) as srv,
        OpenAIClient(srv.url, concurrency=4, timeouts=Timeouts(idle_s=0.3)) as client,
    ):
        recs = await asyncio.gather(*(client.stream(r) for r in reqs))
    bad = recs[1]
    assert bad.status == "error" and bad.error is not None
    assert bad.error.cls == cls
    assert message in bad.error.message
    for rec in recs[:1] + recs[2:]:
        assert (rec.status, rec.error, rec.completion_tokens) == ("ok", None, 8)


async def test_malformed_stream_is_read_to_its_end_with_parse_errors_counted() -> None:
    async with PacedServer(FAST) as srv, OpenAIClient(srv.url) as client:
        rec = await client.stream(req(0, "bad_json"))
    assert (rec.parse_errors, rec.completion_tokens, rec.chunks) == (1, 8, 8)
    assert rec.t_done_ns is not None and rec.finish_reason == "length"


async def test_unreachable_server_is_a_connect_error_record() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    async with PacedServer(FAST) as srv, OpenAIClient(url) as dead, OpenAIClient(srv.url) as live:
        bad, ok = await asyncio.gather(dead.stream(req(0)), live.stream(req(1)))
        with pytest.raises(ServerUnreachable, match="cannot connect"):
            await dead.get_json("/v1/models")
    assert bad.error is not None and bad.error.cls == "connect_error"
    assert (bad.status, bad.http_status, bad.t_first_ns) == ("error", None, None)
    assert ok.status == "ok"


async def test_slow_first_byte_and_total_time_are_timeouts() -> None:
    slow = PacedServer(PacedConfig(ttft_s=5.0))
    async with slow as srv, OpenAIClient(srv.url, timeouts=Timeouts(first_token_s=0.2)) as c:
        rec = await c.stream(req(0))
    assert rec.error is not None and rec.error.cls == "first_byte_timeout"
    long = PacedServer(PacedConfig(ttft_s=0.0, gap_s=0.05))
    async with long as srv, OpenAIClient(srv.url, timeouts=Timeouts(total_s=0.2)) as c:
        rec = await c.stream(req(0, max_tokens=100))
    assert rec.error is not None and rec.error.cls == "total_timeout"
    assert 0 < rec.chunks < 100
    # The watchdog looks every quarter of the total: a 0.05 s total is cut by ~0.0625 s,
    # whenever in its round a stream was sent. It looked every 0.05 s whatever the total, so
    # a stream sent just after a look was cut at the look after next, ~0.1 s.
    long = PacedServer(PacedConfig(ttft_s=0.0, gap_s=0.01))

    async def staggered(c: OpenAIClient, i: int) -> StreamRecord:
        await asyncio.sleep(0.01 * i)
        return await c.stream(req(i, max_tokens=100))

    async with long as srv, OpenAIClient(srv.url, timeouts=Timeouts(total_s=0.05)) as c:
        recs = await asyncio.gather(*(staggered(c, i) for i in range(5)))
    assert all(r.error is not None and r.error.cls == "total_timeout" for r in recs)
    assert max((r.t_done_ns or 0) - (r.t_sent_ns or 0) for r in recs) / 1e9 < 0.085


async def test_outside_cancellation_propagates_and_keeps_a_cancelled_record() -> None:
    long = PacedServer(PacedConfig(ttft_s=0.0, gap_s=0.05))
    async with long as srv, OpenAIClient(srv.url) as client:
        task = asyncio.create_task(client.stream(req(0, max_tokens=100)))
        while not srv.served or not srv.served[0].send_ns:
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        (rec,) = client.take_cancelled()
        assert client.take_cancelled() == []
    assert rec.error is not None and rec.error.cls == "cancelled"
    assert rec.status == "error" and rec.t_sent_ns is not None


def test_failure_summary_counts_classes_most_common_first() -> None:
    def record(i: int, cls: str | None) -> StreamRecord:
        error = StreamError(cls, "x") if cls else None
        return StreamDecoder(chat=False).to_record(
            req(i), run_start_ns=0, http_status=None, t_sent=0, t_headers=None, t_end=1, error=error
        )

    classes = [None, "idle_timeout", "http_500", None, "http_500"]
    recs = [record(i, cls) for i, cls in enumerate(classes)]
    assert failure_summary(recs) == "3 of 5 streams failed: http_500 x2, idle_timeout x1"
    assert failure_summary(recs[:1]) is None


def test_connect_reasons_name_the_resolver_and_the_socket_in_words() -> None:
    # getaddrinfo's EAI_NONAME is -2, which os.strerror read as "Unknown error -2"; aiohttp's
    # connector errors are OSErrors themselves, with the socket's error as os_error.
    key = SimpleNamespace(host="nohost", port=80, ssl=None)
    unresolved = socket.gaierror(-2, "Name or service not known")
    refused = ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed")
    lookup = "host name lookup failed (Name or service not known)"
    assert connect_reason(unresolved) == lookup
    assert connect_reason(aiohttp.ClientConnectorDNSError(key, unresolved)) == lookup
    assert connect_reason(refused) == "Connection refused"
    assert connect_reason(aiohttp.ClientConnectorError(key, refused)) == "Connection refused"
    assert connect_reason(TimeoutError()) == "connect timed out"


def test_cli_exits_nonzero_with_a_one_line_summary(tmp_path: Path) -> None:
    cfg = PacedConfig(ttft_s=0.01, gap_s=0.002, faults={1: "http_500", 3: "http_500", 4: "stall"})
    out = tmp_path / "run"
    with ThreadedPacedServer(cfg) as srv:
        args = ["request", "--base-url", srv.url, "--model", "paced", "--max-tokens", "5"]
        args += ["-n", "6", "-c", "2", "--idle-timeout", "0.3", "--out", str(out)]
        result = CliRunner().invoke(main, args)
    # 4, as `loadgen run` exits when its run ended with failed streams (1: could not start).
    assert result.exit_code == 4
    assert "Traceback" not in result.output
    last = result.output.strip().splitlines()[-1]
    assert last == "Error: 3 of 6 streams failed: http_500 x2, idle_timeout x1"
    recs = read_streams(out)
    assert len(recs) == 6 and sum(r.status == "ok" for r in recs) == 3
    # Without --per-stream only the failing streams get a row (issue 18 item 9).
    assert {r.id: r.id in result.output for r in recs} == {r.id: r.status != "ok" for r in recs}


def test_cli_unreachable_server_is_one_line_without_traceback() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    result = CliRunner().invoke(main, ["request", "--base-url", url, "--model", "m"])
    assert result.exit_code == 1
    assert result.output.strip() == f"Error: cannot connect to {url}: Connection refused"
    no_url = CliRunner(env={"OPENAI_BASE_URL": ""}).invoke(main, ["request"])
    assert no_url.exit_code == 2 and "--base-url" in no_url.output


def test_a_server_without_v1_models_is_sent_the_model_given_unchecked(tmp_path: Path) -> None:
    # `loadgen request` took a proxy that lists no models when --model named one; as a planned
    # run through the arm driver it keeps that, and so does `loadgen run`: one model check.
    with ThreadedPacedServer(PacedConfig(ttft_s=0.0, gap_s=0.0, models=False)) as srv:
        named = CliRunner().invoke(main, ["request", "--base-url", srv.url, "--model", "x",
                                          "--max-tokens", "2", "-n", "2"])  # fmt: skip
        unnamed = CliRunner().invoke(main, ["request", "--base-url", srv.url, "-n", "2"])
        ran = CliRunner().invoke(main, ["run", "smoke", "--base-url", srv.url, "--model", "x",
                                        "--out", str(tmp_path), "--no-progress"])  # fmt: skip
    assert named.exit_code == 0, named.output
    assert "model x" in named.output
    assert [s.body["model"] for s in srv.served[:2]] == ["x", "x"]
    # Nothing to send without --model: the server's answer, in one line, before any stream.
    assert unnamed.exit_code == 1, unnamed.output
    assert (
        unnamed.output.strip()
        .splitlines()[-1]
        .startswith("Error: GET /v1/models returned HTTP 404")
    )
    assert ran.exit_code == 0, ran.output
    assert len(srv.served) == 2 + 4  # smoke's four streams; the unnamed request sent none


def test_sigint_cancels_in_flight_streams_flushes_and_says_interrupted(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with ThreadedPacedServer(PacedConfig(ttft_s=0.0, gap_s=0.05)) as srv:
        cmd = [sys.executable, "-m", "loadgen", "request", "--base-url", srv.url, "--model"]
        cmd += ["paced", "--max-tokens", "400", "-n", "4", "-c", "2", "--out", str(out)]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        deadline = time.monotonic() + 60
        while sum(bool(s.send_ns) for s in srv.served) < 2:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail(f"the CLI never streamed: {proc.communicate()}")
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        try:
            stdout, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail(f"no exit within 30 s of SIGINT: {proc.communicate()}")
    assert proc.returncode == 130, stderr
    # Above it, the one warning of a server without /metrics, as `loadgen run` gives it.
    assert stderr.decode().strip().splitlines()[-1] == "interrupted: 0 of 4 streams finished"
    # The tables of what was recorded, as at the end of a run: the cut streams' rows.
    assert stdout.decode().count("default/r0/request/") == 2
    assert b"Traceback" not in stdout + stderr
    recs = read_streams(out)
    assert [r.error.cls for r in recs if r.error] == ["cancelled", "cancelled"]
    assert all(r.chunks > 0 for r in recs)
