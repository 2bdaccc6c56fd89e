"""A local server's wait for a core around each stream (client/hostload.py's reads, the
analysis' stream_server_waits): read every 2 ms in a process of its own, kept where they
moved, and a term of the stream's error bound. A stream whose server waited longer than its
tolerance between its send and first token is client_limited, named for it in its evidence
and the banner; one whose server waited less, or a run that read no server, is judged as
before."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from pathlib import Path

import orjson
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
from loadgen.client.hostload import (
    READER_START_S,
    WAIT_STEP_NS,
    MainWaits,
    WaitReads,
    reading_server_waits,
)
from loadgen.codec import to_json
from loadgen.records import (
    SERVER_WAITS,
    ServerWaitRead,
    read_records,
    read_server_wait,
    read_streams,
)
from loadgen.report.banners import client_reasons
from loadgen.report.cmd import write_report

from support.cli import loadgen
from support.run_fixtures import manifest, stream, write_run
from support.server_process import sim_process

MS = 1_000_000


def _kept(reads: list[tuple[int, tuple[int, ...]]]) -> list[tuple[int, tuple[int, ...]]]:
    out: list[ServerWaitRead] = []
    keeper = WaitReads(out.append)
    for t, counts in reads:
        keeper.take(t, counts)
    keeper.close()
    return [(r.t_ns, r.waits_ns) for r in out]


def test_reads_are_kept_where_a_count_moved_with_the_read_before_it() -> None:
    step, half = WAIT_STEP_NS, WAIT_STEP_NS // 2
    reads = [
        (0, (500, 900)),  # the first: counted from here
        (2, (500, 900)),
        (4, (500 + half, 900)),  # moved less than a step: not kept yet
        (6, (500 + half, 900)),
        (8, (500 + half, 900 + step)),  # replica 1 moved a step: kept, with read 6 before it
        (10, (500 + half + step, 900 + step)),  # replica 0 a step since read 8: kept alone
        (12, (500 + 2 * step, 900 + step)),  # half a step since: not kept
        (14, (500 + 2 * step, 900 + step)),  # the last
    ]
    assert _kept(reads) == [
        (0, (0, 0)),
        (6, (half, 0)),
        (8, (half, step)),
        (10, (half + step, step)),
        (14, (2 * step, step)),
    ]


def test_a_count_that_goes_down_is_kept_at_its_most() -> None:
    # A server process gone takes its count with it: the replica's wait never goes back.
    reads = [(0, (0,)), (2, (3 * WAIT_STEP_NS,)), (4, (WAIT_STEP_NS,)), (6, (WAIT_STEP_NS,))]
    assert _kept(reads) == [(0, (0,)), (2, (3 * WAIT_STEP_NS,)), (6, (3 * WAIT_STEP_NS,))]


def test_main_waits_read_each_process_once_and_count_none_gone() -> None:
    # A child's count is its schedstat's second field, read in place, once a read: the three
    # replicas it serves read the same count, between the field's reads before and after; a
    # pid with no process, and the child once gone, count 0.
    kid = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    schedstat = Path(f"/proc/{kid.pid}/schedstat")
    try:
        waits = MainWaits([[kid.pid], [kid.pid], [dead.pid, kid.pid]])
        before = int(schedstat.read_bytes().split()[1])
        counts = waits.counts()
        after = int(schedstat.read_bytes().split()[1])
    finally:
        kid.kill()
        kid.wait()
    assert counts[0] == counts[1] == counts[2] and before <= counts[0] <= after
    assert waits.counts() == [0, 0, 0]
    waits.close()


def test_the_servers_waits_are_read_in_a_process_of_their_own(tmp_path: Path) -> None:
    # Two replicas of one process each (children of one thread, whose waits never go down);
    # the reads begin before the block and end after it, one column a replica.
    code = "import time; time.sleep(60)"
    kids = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(2)]
    path = tmp_path / SERVER_WAITS
    try:
        start = time.perf_counter_ns()
        with reading_server_waits([[kids[0].pid], [kids[1].pid]], path, start):
            inside = time.perf_counter_ns() - start
            time.sleep(0.05)
            end = time.perf_counter_ns() - start
    finally:
        for kid in kids:
            kid.kill()
            kid.wait()
    reads, bad = read_records(path, read_server_wait)
    assert bad == 0 and len(reads) >= 2
    assert reads[0].t_ns <= inside and reads[-1].t_ns >= end
    assert reads[0].waits_ns == (0, 0)
    assert [r.t_ns for r in reads] == sorted(r.t_ns for r in reads)
    assert all(len(r.waits_ns) == 2 and min(r.waits_ns) >= 0 for r in reads)


def test_a_reader_that_cannot_start_holds_nothing_up(tmp_path: Path) -> None:
    # Its file cannot be made: the reader ends at once and the block runs without reads,
    # never waiting out READER_START_S for a reader that is gone.
    path = tmp_path / "gone" / SERVER_WAITS
    began = time.monotonic()
    with reading_server_waits([[1]], path, time.perf_counter_ns()):
        entered = time.monotonic() - began
    assert entered < READER_START_S / 2
    assert not path.exists()


# run.json's client.host_cpu: loadgen's processes the host's main load, or the server's.
LOADGEN_BUSY = {"span_s": 1.0, "host_busy_cores": 1.3, "client_cores": 1.0, "cores": 2}
SERVER_BUSY = {"span_s": 1.0, "host_busy_cores": 1.9, "client_cores": 0.3, "cores": 2}

# Replica 0 waits 1.5 ms between the reads at 40 and 42 ms; replica 1 never.
READS = [
    ServerWaitRead(0, (0, 0)),
    ServerWaitRead(40 * MS, (0, 0)),
    ServerWaitRead(42 * MS, (3 * MS // 2, 0)),
    ServerWaitRead(100 * MS, (3 * MS // 2, 0)),
]


def _sent(at_ms: float, ttft_ms: float = 2.0, replica: int = 0, id: str = "s"):
    rec = stream(
        id, sent=at_ms / 1e3, chunks=[(at_ms + ttft_ms) / 1e3, (at_ms + ttft_ms + 1) / 1e3]
    )
    return dataclasses.replace(rec, replica=replica, loop_lag_ttft_ns=0)


def test_a_streams_server_wait_is_read_between_the_reads_around_its_ttft() -> None:
    recs = [
        _sent(39, id="over"),  # 39-41 ms: the reads at 0 and 42 bracket it, 1.5 ms
        _sent(43, id="after"),  # 43-45 ms: 42 and 100, none
        _sent(39, replica=1, id="other"),  # replica 1's own column
        _sent(99, id="past"),  # its first token after the last read: no figure
        dataclasses.replace(_sent(10, id="none"), t_first_ns=None),
    ]
    waits = stream_server_waits(recs, READS, LOADGEN_BUSY)
    assert waits == {"over": 3 * MS // 2, "after": 0, "other": 0}
    assert stream_server_waits(recs, [], LOADGEN_BUSY) == {}
    # A server that kept the host busy by itself (loadgen under half of the busy cores), or a
    # run that measured nothing of its host: its waits are its own latency, none is charged.
    assert stream_server_waits(recs, READS, SERVER_BUSY) == {}
    assert stream_server_waits(recs, READS, {}) == {}


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
    recs = [_sent(39, id="over"), _sent(43, id="after")]
    client = {"loop_lag_max_ms": 1.0, "host_cpu": LOADGEN_BUSY}
    run = write_run(tmp_path / "run", recs, run=manifest(client=client))
    (run / SERVER_WAITS).write_bytes(b"".join(orjson.dumps(to_json(r)) + b"\n" for r in READS))
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
    # The same run without the reads: judged as before, no word of a server's wait.
    (run / SERVER_WAITS).unlink()
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
    # `loadgen sim` in a process of its own on 127.0.0.1: its waits are read beside the run.
    with sim_process(tmp_path / "sim.log", "--profile", "tiny") as (_, url):
        done = loadgen("request", "--base-url", url, "-n", "20", "-c", "4", "--max-tokens", "8",
                       "--prompt-tokens", "8", "--out", tmp_path / "local")  # fmt: skip
    assert done.returncode == 0, done.stderr
    reads, bad = read_records(tmp_path / "local" / SERVER_WAITS, read_server_wait)
    assert bad == 0 and len(reads) >= 2 and reads[0].waits_ns == (0,)
    recs = [r for r in read_streams(tmp_path / "local") if r.t_first_ns is not None]
    # Every stream is bracketed by the reads (judged as where loadgen was the host's main
    # load: whether it was in this run is the machine's, not the reads').
    waits = stream_server_waits(recs, reads, LOADGEN_BUSY)
    assert set(waits) == {r.id for r in recs}
    assert "host_cpu" in (read_manifest(tmp_path / "local").client or {})
    # The virtual clock serves no HTTP: no server process, nothing read.
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(TINY)
    virtual = loadgen("run", scenario, "--clock", "virtual", "--out", tmp_path / "virtual")
    assert virtual.returncode == 0, virtual.stderr
    (run_dir,) = list((tmp_path / "virtual").iterdir())
    assert (run_dir / "streams.jsonl").is_file()
    assert not (run_dir / SERVER_WAITS).exists()


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
