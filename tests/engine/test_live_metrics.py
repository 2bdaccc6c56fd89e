"""loadgen's own /metrics (`--metrics-port`): exact figures from known records, a wall-clock soak
of the sim scraped while it runs and parsed by prometheus_client's parser, and the port's
errors (in use, virtual clock) said in one line."""

from __future__ import annotations

import dataclasses
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from loadgen.analysis.rates import token_gaps_ns
from loadgen.engine.live_metrics import LiveMetrics, MetricsPortInUse, serving
from loadgen.engine.run import RunOptions, watched
from loadgen.records import StreamError, StreamRecord, read_streams

from support.cli import assert_one_line_error, loadgen, spawn_loadgen

MS = 1_000_000
NAMES = {
    "loadgen_streams_in_flight": "gauge",
    "loadgen_streams_sent": "counter",
    "loadgen_streams_ok": "counter",
    "loadgen_streams_failed": "counter",
    "loadgen_ttft_seconds": "histogram",
    "loadgen_itl_seconds": "histogram",
    "loadgen_dispatch_late_seconds": "histogram",
    "loadgen_loop_lag_seconds": "histogram",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def record(group: str, *, sent: int, first: int | None, chunks: list[int], late: int = 0,
           error: str | None = None) -> StreamRecord:  # fmt: skip
    return StreamRecord(
        id=f"{group}-{sent}", group=group, rep=0, status="error" if error else "ok",
        error=StreamError(error, "x") if error else None, api="completions", model="m",
        prompt_tokens=10, requested_prompt_tokens=10, completion_tokens=len(chunks),
        cached_tokens=None, chunks=len(chunks), events=len(chunks), bytes=0,
        token_source="chunk_count", finish_reason="length", http_status=200,
        t_intended_ns=sent - late, t_sent_ns=sent, t_headers_ns=sent, t_first_ns=first,
        t_last_ns=chunks[-1] if chunks else None, t_done_ns=sent + 10**9, chunk_ns=chunks,
    )  # fmt: skip


def families(text: str) -> dict[str, dict[str, object]]:
    """name -> {"type": ..., "samples": {(sample name, labels): value}} as the parser reads it."""
    out: dict[str, dict[str, object]] = {}
    for fam in text_string_to_metric_families(text):
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in fam.samples}
        out[fam.name] = {"type": fam.type, "samples": samples}
    return out


def exposition(live: LiveMetrics) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(live)
    return generate_latest(registry).decode()


def test_known_records_give_exact_counts_buckets_and_classes():
    live = LiveMetrics()
    # TTFT 40 ms, gaps of 20 ms (one token each: chunk_count) and 3 ms late.
    live.see(record("a", sent=0, first=40 * MS, chunks=[40 * MS, 60 * MS, 80 * MS], late=3 * MS))
    live.see(record("a", sent=0, first=300 * MS, chunks=[300 * MS]))
    live.see(record("b", sent=0, first=None, chunks=[], error="http_503"))
    live.see(record("b", sent=0, first=None, chunks=[], error="idle_timeout"))
    got = families(exposition(live))
    ok, failed = got["loadgen_streams_ok"]["samples"], got["loadgen_streams_failed"]["samples"]
    assert ok == {("loadgen_streams_ok_total", (("group", "a"),)): 2.0}
    assert failed == {
        ("loadgen_streams_failed_total", (("class", "http_503"), ("group", "b"))): 1.0,
        ("loadgen_streams_failed_total", (("class", "idle_timeout"), ("group", "b"))): 1.0,
    }
    ttft = got["loadgen_ttft_seconds"]["samples"]
    a = (("group", "a"),)
    assert ttft[("loadgen_ttft_seconds_count", a)] == 2
    assert ttft[("loadgen_ttft_seconds_sum", a)] == pytest.approx(0.34)
    assert ttft[("loadgen_ttft_seconds_bucket", (("group", "a"), ("le", "0.025")))] == 0
    assert ttft[("loadgen_ttft_seconds_bucket", (("group", "a"), ("le", "0.05")))] == 1
    assert ttft[("loadgen_ttft_seconds_bucket", (("group", "a"), ("le", "0.25")))] == 1
    assert ttft[("loadgen_ttft_seconds_bucket", (("group", "a"), ("le", "0.5")))] == 2
    itl = got["loadgen_itl_seconds"]["samples"]
    assert itl[("loadgen_itl_seconds_count", a)] == 2  # two gaps, of 20 ms each
    assert itl[("loadgen_itl_seconds_bucket", (("group", "a"), ("le", "0.015")))] == 0
    # A value on a bound belongs to that bucket (le: less than or equal).
    assert itl[("loadgen_itl_seconds_bucket", (("group", "a"), ("le", "0.02")))] == 2
    late = got["loadgen_dispatch_late_seconds"]["samples"]
    assert late[("loadgen_dispatch_late_seconds_bucket", (("group", "a"), ("le", "0.0025")))] == 1
    assert late[("loadgen_dispatch_late_seconds_bucket", (("group", "a"), ("le", "0.005")))] == 2


def test_sends_count_in_flight_until_they_end_and_workers_records_count_as_sent():
    live = LiveMetrics()
    live.started()
    live.started()
    live.left()
    seen: list[StreamRecord] = []
    live.sent_elsewhere(lambda rec, line=None: seen.append(rec))(
        record("a", sent=0, first=MS, chunks=[MS])
    )
    got = families(exposition(live))
    assert got["loadgen_streams_in_flight"]["samples"] == {("loadgen_streams_in_flight", ()): 1}
    assert got["loadgen_streams_sent"]["samples"] == {("loadgen_streams_sent_total", ()): 3}
    assert len(seen) == 1


def scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
            return resp.read().decode()
    except OSError:
        return None


Families = dict[str, dict[str, object]]


def scrapes_while_running(
    proc: subprocess.Popen[str], port: int, wanted: Callable[[list[Families], Families], bool]
) -> list[Families]:
    """Scrapes `port` every 0.2 s until `proc` exits (90 s at most), keeping each scrape that
    `wanted` takes given those kept so far; `proc` must exit 0."""
    kept: list[Families] = []
    try:
        deadline = time.monotonic() + 90
        while proc.poll() is None and time.monotonic() < deadline:
            text = scrape(port)
            if text is not None and wanted(kept, fams := families(text)):
                kept.append(fams)
            time.sleep(0.2)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    return kept


def finished(fams: dict[str, dict[str, object]]) -> float:
    """Streams ended, ok or failed, as one scrape counts them."""
    names = ("loadgen_streams_ok", "loadgen_streams_failed")
    return sum(sum(fams[n]["samples"].values()) for n in names)  # type: ignore[attr-defined]


def test_a_wall_clock_soak_is_scraped_while_it_runs(tmp_path: Path):
    port = free_port()
    # 120 s at the sim's speed 20: about 6 s of wall time, one stream at a time.
    args = ["soak", "soak_steady", "--clock", "wall", "--duration", "120s", "--metrics-port",
            str(port), "--no-progress", "--out", str(tmp_path)]  # fmt: skip

    def more_finished(kept: list[Families], fams: Families) -> bool:
        return len(kept) < 2 and finished(fams) > (finished(kept[-1]) if kept else 0)

    scrapes = scrapes_while_running(spawn_loadgen(args), port, more_finished)
    assert len(scrapes) == 2, "two scrapes with streams finished between them, during the soak"
    for fams in scrapes:
        assert {name: fams[name]["type"] for name in NAMES} == NAMES
        for name, kind in NAMES.items():
            if kind == "histogram":
                assert_cumulative(fams[name]["samples"])  # type: ignore[arg-type]
        # One scrape is one snapshot: every ok stream had its first token counted.
        ok = sum(fams["loadgen_streams_ok"]["samples"].values())  # type: ignore[attr-defined]
        ttft = fams["loadgen_ttft_seconds"]["samples"].items()  # type: ignore[attr-defined]
        assert ok == sum(v for (n, _), v in ttft if n.endswith("_count"))
    first, second = scrapes
    for name, kind in NAMES.items():
        if kind == "counter" or kind == "histogram":
            before, after = first[name]["samples"], second[name]["samples"]
            rose = [after[k] >= v for k, v in before.items()]  # type: ignore[attr-defined,index]
            assert all(rose), name
    # The server stopped with the command, and it never counted more than was recorded.
    assert scrape(port) is None
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    measured = [r for r in read_streams(run) if r.phase == "measure"]
    assert finished(second) <= len(measured)


def assert_cumulative(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> None:
    """Each label set's buckets rise with `le`, and its +Inf bucket is its _count."""
    series: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
    for (name, labels), value in samples.items():
        if name.endswith("_bucket"):
            le = dict(labels)["le"]
            rest = tuple(kv for kv in labels if kv[0] != "le")
            series.setdefault(rest, []).append((float(le), value))
    assert series, "a histogram with no series"
    for labels, buckets in series.items():
        counts = [n for _, n in sorted(buckets)]
        assert counts == sorted(counts)
        name = next(n for n, _ in samples if n.endswith("_count"))
        assert counts[-1] == samples[(name, labels)]


def test_a_port_in_use_is_one_line_naming_the_option(tmp_path: Path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(MetricsPortInUse, match=f"--metrics-port {port}"), serving(port):
            pass
        proc = loadgen("soak", "soak_steady", "--clock", "wall", "--duration", "5s",
                       "--metrics-port", port, "--no-progress", "--out", tmp_path)  # fmt: skip
    line = assert_one_line_error(proc)
    assert f"--metrics-port {port}" in line and "pick a free port" in line
    # Nothing was sent: the port is checked before the first stream.
    assert not any(tmp_path.rglob("streams.jsonl"))


def test_a_free_port_serves_and_is_released_at_the_end():
    port = free_port()
    with serving(port) as live:
        live.started()
        text = scrape(port)
    assert text is not None and "loadgen_streams_sent_total 1.0" in text
    assert scrape(port) is None
    with serving(port):  # free again
        pass


def test_metrics_port_on_the_virtual_clock_is_refused_in_one_line():
    proc = loadgen("soak", "soak_steady", "--duration", "1m", "--metrics-port", "9")
    assert proc.returncode == 2
    assert "--metrics-port serves a wall-clock run" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("chunk_tokens", [[1, 3, 0, 2, 1], None])
def test_itl_buckets_count_the_same_gaps_as_the_analysis(chunk_tokens: list[int] | None):
    chunks = [40 * MS, 43 * MS, 52 * MS, 60 * MS, 61 * MS]
    rec = dataclasses.replace(record("a", sent=0, first=40 * MS, chunks=chunks),
                              chunk_tokens=chunk_tokens, completion_tokens=9)  # fmt: skip
    live = LiveMetrics()
    live.see(rec)
    samples = families(exposition(live))["loadgen_itl_seconds"]["samples"]
    gaps = token_gaps_ns(rec)
    a = (("group", "a"),)
    assert samples[("loadgen_itl_seconds_count", a)] == len(gaps)
    assert samples[("loadgen_itl_seconds_sum", a)] == pytest.approx(sum(gaps) / 1e9)
    for le in ("0.001", "0.0025", "0.005", "0.01"):
        below = sum(g <= float(le) * 1e9 for g in gaps)
        assert samples[("loadgen_itl_seconds_bucket", (*a, ("le", le)))] == below, le


def test_worker_processes_streams_are_counted_in_the_parent(tmp_path: Path):
    port = free_port()
    args = ["run", "smoke", "--clock", "wall", "--workers", "2", "--concurrency", "4",
            "--requests", "300", "--metrics-port", str(port), "--no-progress", "--out",
            str(tmp_path)]  # fmt: skip
    seen = scrapes_while_running(spawn_loadgen(args), port, lambda _, f: finished(f) > 0)
    assert seen, "no scrape saw a finished stream while the workers sent"
    for fams in seen:
        # A worker reports a stream only at its end: sent with its record, never in flight.
        sent = fams["loadgen_streams_sent"]["samples"][("loadgen_streams_sent_total", ())]  # type: ignore[index]
        assert sent == finished(fams)
        assert fams["loadgen_streams_in_flight"]["samples"] == {
            ("loadgen_streams_in_flight", ()): 0
        }


def test_nested_runs_share_one_server_and_a_run_without_the_port_serves_none():
    port = free_port()
    with watched(RunOptions(metrics_port=port)) as outer:
        with watched(outer) as inner:  # run_arm inside run_plan
            assert inner.live is outer.live is not None
        assert scrape(port) is not None  # the inner block did not stop it
    assert scrape(port) is None
    with watched(RunOptions()) as plain:
        assert plain.live is None
