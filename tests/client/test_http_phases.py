"""HTTP phases per stream (connect, write, head, first byte, first chunk) and the kernel's
word at the write and the first byte: they sum to the TTFT on one clock, and a send side late
beyond tolerance is flagged by who held it, on both sides of the threshold."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from click.testing import CliRunner

from loadgen.analysis.phases import PHASES, http_phases
from loadgen.analysis.selferror import (
    ClientLimits,
    send_late_by_holder,
    tolerance_s,
)
from loadgen.analysis.summary import analyze_run
from loadgen.cli import main
from loadgen.client import openai
from loadgen.client.openai import OpenAIClient
from loadgen.records import StreamRecord, read_streams
from loadgen.report.banners import client_banner
from loadgen.report.cmd import render_report
from loadgen.report.text import send_late_line
from loadgen.request import StreamRequest
from loadgen.sim.server import start_sim_server

from support.pacedserver import PacedConfig, PacedServer, ThreadedPacedServer
from support.run_fixtures import manifest, stream, write_run
from support.sim import sim_config, stream_request

MS = 1_000_000


async def _streams(url: str, reqs: list[StreamRequest], *, warm: bool) -> list[StreamRecord]:
    """The requests one after another on one client; unless `warm` (a run's way: its
    connections opened before the clock starts), the first opens the connection."""
    async with OpenAIClient(url, concurrency=1, raw_stream=True) as client:
        if warm:
            await client.warm(1)
        return [await client.stream(r) for r in reqs]


async def test_the_phases_sum_to_the_ttft_over_loopback_against_the_sim() -> None:
    reqs = [stream_request(f"r{i}", 32, 4) for i in range(6)]
    async with start_sim_server(sim_config()) as sim:
        recs = await _streams(sim.url, reqs, warm=False)
    assert all(r.status == "ok" for r in recs), [r.error for r in recs]
    for i, r in enumerate(recs):
        phases = http_phases(r)
        assert phases is not None, r
        assert all(d >= 0 for d in phases.durations_ns), phases
        ttft = r.t_first_ns - r.t_sent_ns  # type: ignore[operator]
        assert abs(sum(phases.durations_ns) - ttft) <= 100_000  # 0.1 ms
        # Stamped in order on the run clock, every one of them.
        stamps = [r.t_sent_ns, r.t_written_ns, r.t_headers_ns, r.t_first_byte_ns, r.t_first_ns]
        assert stamps == sorted(stamps)  # type: ignore[type-var]
        # The first stream opened the connection; the others rode it, with no connect phase.
        assert r.conn_reused is (i > 0)
        assert (r.t_connected_ns is None) is (i > 0)
        assert (phases.connect_ns > 0) is (i == 0)
        # At the first byte of the answer the request has long left and been acknowledged.
        assert r.tcp_first_byte is not None and len(r.tcp_first_byte) == 3
        assert r.tcp_first_byte[0] > 0 and r.tcp_first_byte[1:] == [0, 0]


async def test_a_streams_rtt_is_the_one_its_first_byte_met_asked_once(monkeypatch) -> None:
    # A second TCP_INFO at the stream's end cost 3% of a worker's CPU at 16-token answers.
    asked_at_end: list[object] = []
    monkeypatch.setattr(openai, "tcp_rtt_us", lambda *args: asked_at_end.append(args))
    async with start_sim_server(sim_config()) as sim:
        recs = await _streams(sim.url, [stream_request(f"r{i}", 32, 4) for i in range(3)],
                              warm=True)  # fmt: skip
    assert asked_at_end == []
    assert all(r.tcp_first_byte and r.rtt_us == r.tcp_first_byte[0] > 0 for r in recs)


async def test_the_run_sums_its_phases_and_the_report_says_where_the_ttfts_went(
    tmp_path: Path,
) -> None:
    reqs = [stream_request(f"r{i}", 32, 4) for i in range(5)]
    async with start_sim_server(sim_config()) as sim:
        recs = await _streams(sim.url, reqs, warm=False)
    run = write_run(tmp_path / "run", recs, run=manifest(planned_streams=5))
    got = analyze_run(run).summary["run"]["http_phases"]
    assert got["stamped"] == 5 and got["reused"] == 4
    assert list(got["p50_ms"]) == list(PHASES) == list(got["p90_ms"])
    assert sum(got["held_by"].values()) == 5
    ttfts = sorted((r.t_first_ns - r.t_sent_ns) / 1e6 for r in recs)  # type: ignore[operator]
    assert got["p50_ms"]["first_chunk"] + got["p50_ms"]["head"] <= ttfts[-1]
    text = " ".join(render_report(run).split())  # the terminal's width wraps the line
    assert "http phases p50 ms (5 streams, 4 on kept-alive connections): connect 0 |" in text
    assert "send side held by" in text
    # Records without the stamps (aiohttp's reader, the virtual clock): no block, no line.
    bare = [dataclasses.replace(r, t_written_ns=None) for r in recs]
    plain = write_run(tmp_path / "plain", bare, run=manifest(planned_streams=5))
    assert analyze_run(plain).summary["run"]["http_phases"] is None
    assert "http phases" not in render_report(plain)


async def test_aiohttps_reader_leaves_the_phases_unmeasured() -> None:
    async with (
        start_sim_server(sim_config()) as sim,
        OpenAIClient(sim.url, concurrency=1, raw_stream=False) as client,
    ):
        rec = await client.stream(stream_request("a", 8, 2))
    assert rec.status == "ok" and rec.t_written_ns is None and rec.conn_reused is None
    assert http_phases(rec) is None and send_late_by_holder([rec]) == {}


def _stamped(head_ms: float, *, ttft_ms: float = 100.0, rtt_us: int = 30) -> StreamRecord:
    """A stream on a kept-alive connection whose head came `head_ms` after its write."""
    sent = 10 * MS
    written = sent + 20_000
    head = written + round(head_ms * MS)
    first = sent + round(ttft_ms * MS)
    return dataclasses.replace(
        stream("s", chunks=[first / 1e9, first / 1e9 + 0.01]), t_sent_ns=sent,
        t_intended_ns=sent, t_headers_ns=head, t_first_byte_ns=head, t_first_ns=first,
        conn_reused=True, t_written_ns=written, tcp_first_byte=[rtt_us, 0, 0],
    )  # fmt: skip


def test_the_send_side_is_judged_against_the_ttfts_tolerance_both_ways() -> None:
    # TTFT 100 ms: tolerance 5 ms. The send side is write (20 us) + head.
    quiet, late = _stamped(4.9), _stamped(5.1)
    assert tolerance_s(quiet) == tolerance_s(late) == 0.005
    assert send_late_by_holder([quiet]) == {}
    assert client_banner(ClientLimits(1, send_late=send_late_by_holder([quiet]))) is None
    assert send_late_by_holder([late, late, quiet]) == {"server": 2}
    # The head wait's first round trip is the kernel's, the rest the server's.
    phases = http_phases(late)
    assert phases is not None
    assert phases.send_holders_ns() == {"client": 20_000, "connect": 0, "kernel": 30_000,
                                        "server": round(5.1 * MS) - 30_000}  # fmt: skip
    # A 6 ms RTT over a 5.1 ms head: the whole wait was the network's.
    far = http_phases(_stamped(5.1, rtt_us=6000))
    assert far is not None and far.send_holder() == "kernel"


def _written_late(write_ms: float, *, ttft_ms: float = 100.0) -> StreamRecord:
    """A stream whose request loadgen itself took `write_ms` to hand to the kernel."""
    rec = _stamped(0.01, ttft_ms=ttft_ms)
    assert rec.t_written_ns is not None and rec.t_headers_ns is not None
    slow = round(write_ms * MS)
    return dataclasses.replace(rec, t_written_ns=rec.t_written_ns + slow,
                               t_headers_ns=rec.t_headers_ns + slow,
                               t_first_byte_ns=rec.t_headers_ns + slow)  # fmt: skip


def test_only_loadgens_own_late_write_limits_the_run() -> None:
    # TTFT 100 ms, tolerance 5 ms: a 6 ms write is loadgen's; a 5.1 ms head is the server's.
    mine = send_late_by_holder([_written_late(6.0)])
    assert mine == {"client": 1}
    judged = ClientLimits(1, send_late=mine)
    assert judged.send_late_loadgen == 1 and judged.limits_run
    banner = client_banner(judged)
    assert banner is not None and "1 of 1 requests' send side was late" in banner
    theirs = ClientLimits(1, send_late=send_late_by_holder([_stamped(5.1)]))
    assert theirs.send_late == {"server": 1} and not theirs.limits_run
    assert client_banner(theirs) is None


async def test_a_request_read_late_by_the_server_is_the_servers_time_not_loadgens() -> None:
    reqs = [StreamRequest(id=f"r{i}", model="paced", prompt="alpha bravo", max_tokens=3)
            for i in range(4)]  # fmt: skip
    async with PacedServer(PacedConfig(ttft_s=0.2, gap_s=0.002, read_delay_s=0.05)) as srv:
        late = await _streams(srv.url, reqs, warm=True)
    # The 50 ms before the read is the server's share of every send side (tolerance 12.5 ms).
    for r in late:
        phases = http_phases(r)
        assert phases is not None and phases.head_ns >= 50 * MS > tolerance_s(r) * 1e9
        assert phases.send_holder() == "server"
    judged = ClientLimits(4, send_late=send_late_by_holder(late))
    assert judged.send_late == {"server": 4} and not judged.limits_run
    assert client_banner(judged) is None
    line = send_late_line(judged)
    assert line is not None and line.startswith("!! SEND SIDE LATE: 4 of 4 requests")
    assert "(held by: server 4)" in line
    assert send_late_line(ClientLimits(4, send_late={"client": 4})) is None
    assert send_late_line(ClientLimits(4)) is None


def test_request_strict_says_who_held_a_late_send_side_and_passes_when_it_was_the_server(
    tmp_path: Path,
) -> None:
    cfg = PacedConfig(ttft_s=0.05, gap_s=0.002, read_delay_s=0.06)
    with ThreadedPacedServer(cfg) as srv:
        res = CliRunner().invoke(
            main,
            ["request", "--base-url", srv.url, "-n", "3", "-c", "1", "--max-tokens", "3",
             "--prompt-tokens", "4", "--strict", "--out", str(tmp_path / "run")],
        )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert not any(line.startswith("!! CLIENT LIMITED") for line in res.output.splitlines())
    report = " ".join(render_report(tmp_path / "run").split())  # the terminal's width wraps it
    assert "!! SEND SIDE LATE: 3 of 3 requests" in report and "held by: server 3" in report
    recs = read_streams(tmp_path / "run")
    assert len(recs) == 3 and all(http_phases(r) is not None for r in recs)
