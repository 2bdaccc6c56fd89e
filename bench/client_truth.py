"""How far loadgen's TTFT and chunk gaps are from firehose's truth at N paced streams, and
whether loadgen says so itself (client_limited streams, the banner, the --strict exit code).

firehose (../shared/tools/firehose, built into build/) paces every stream (TTFT 50 ms, 20 ms
gaps) and logs what it actually sent: per request its arrival and first-chunk times, per chunk
its send time (CLOCK_MONOTONIC, the clock of perf_counter_ns). `loadgen request -n N -c N`
runs against it with --strict, in 1 worker process and in as many as the machine has CPUs;
each stream's TTFT is compared with firehose's own for the same response (joined on the
response id), and the table says how many streams were flagged and whether any stream whose
true error exceeded its tolerance went unflagged (`silent`: a row passes only with "no").
The ratios are loadgen's median TTFT and mean chunk gap over firehose's for the same streams.
Without firehose (no C compiler, no ../shared) that is said in one line and loadgen's side
still runs, against tests/support/pacedserver.py: every stream must come back ok.

    .venv/bin/python bench/client_truth.py [--smoke] [--streams 256 1024] [--tokens 200]
                                           [--workers 1 8 14] [--out table.txt]

(At 4096 streams on 2 cores firehose itself no longer keeps the pace: the chunks it sent were
0.00 ms apart at p50, so the truth is a burst; `--streams 4096` still shows it.)

Every row is followed by loadgen's own split of its TTFTs (analysis/phases.py): the median of
each HTTP phase (connect, write, head, first byte, first chunk), the kernel's word (RTT, the
most request bytes not yet sent or acknowledged at the first byte), who held each stream's
send side (loadgen's process, the TCP connect, the kernel's round trip or the server) and the
streams whose send side was late beyond tolerance, as the run's CLIENT LIMITED check counts
them. Against firehose the send side's truth stands beside it: loadgen's send stamp -> its
write (loadgen's own) and its write -> firehose's read (the kernel and the server's read).
`--read-delay-ms` runs tests/support/pacedserver.py instead, waiting that long before reading
each request: the send side then goes to the server, and every stream is counted late.

With --ingest it first prints bench/client_ingest.py's table, so one run shows events/s at
C = 1 / 64 / 256 (loadgen, its aiohttp reader, the bare loop, ratios) and the TTFT errors:
`client_truth.py --ingest --streams 256 1024` is issue #14's must-show.
"""

from __future__ import annotations

import os
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson
from client_ingest import (
    PLAN,
    REPO,
    firehose_binary,
    free_port,
    ingest,
    pinned_to,
    print_ingest,
    wait_listening,
)
from harness import Ratio, parser, ratio, report, unavailable

sys.path.insert(0, str(REPO))

from itertools import pairwise
from math import nan

from loadgen.analysis.inputs import read_manifest
from loadgen.analysis.phases import phase_summary
from loadgen.analysis.selferror import (
    CLIENT_LIMITED_EXIT,
    client_error_evidence,
    send_late_by_holder,
    send_late_holder,
    stream_server_waits,
    tolerance_s,
)
from loadgen.records import StreamRecord, read_streams

MS = 1e6
SMOKE_STREAMS, SMOKE_TOKENS = 16, 20


def server_times(log: Path) -> dict[int, tuple[int, int]]:
    """firehose's request read and first chunk sent (CLOCK_MONOTONIC ns) by its request number,
    the number in its response id, in hex ("cmpl-00000000000001a5")."""
    out = {}
    for line in log.read_text().splitlines():
        f = line.split(",")
        out[int(f[0])] = (int(f[3]), int(f[4]))
    return out


def request_number(response_id: str | None) -> int | None:
    try:
        return int((response_id or "").rpartition("-")[2], 16)
    except ValueError:
        return None


def true_gaps(chunk_log: Path) -> list[float]:
    """The gaps between consecutive chunks firehose sent on each stream, ms."""
    sends: dict[int, list[int]] = {}
    for rid, _, t in struct.iter_unpack("<IIQ", chunk_log.read_bytes()):
        sends.setdefault(rid, []).append(t)
    return [(b - a) / MS for ts in sends.values() for a, b in pairwise(ts)]


def run_request(
    server: list[str], n: int, tokens: int, workers: int, reader: str, out: Path
) -> tuple[list[StreamRecord], subprocess.CompletedProcess[str]]:
    """`loadgen request -n N -c N --strict` against `server` (a command taking --port), with
    the ok records it wrote and its completed process; exit 1 when no stream came back ok."""
    port = free_port()
    proc = subprocess.Popen(
        [*server, "--port", str(port)], stdout=subprocess.DEVNULL, preexec_fn=pinned_to(0)
    )
    try:
        wait_listening(port)
        probe = [sys.executable, "-m", "loadgen", "request", "--base-url",
                 f"http://127.0.0.1:{port}", "-n", str(n), "-c", str(n), "--max-tokens",
                 str(tokens), "--prompt-tokens", "8", "--out", str(out), "--strict",
                 "--workers", str(workers)]  # fmt: skip
        # The client (its workers inherit it) keeps off the server's core: unpinned, workers
        # landed on CPU 0 and the server read requests late by whole scheduler slices.
        pin = pinned_to(1) if workers == 1 else off_server_core()
        env = {**os.environ, "LOADGEN_STREAM_READER": reader}
        res = subprocess.run(probe, capture_output=True, text=True, preexec_fn=pin, env=env)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(10)
    recs = [r for r in read_streams(out) if r.status == "ok"] if out.exists() else []
    if not recs:  # a refused or failed run: say why instead of a table of empty medians
        raise SystemExit(
            f"{n} streams, {workers} workers: no ok stream ({res.returncode}): "
            + " | ".join(res.stderr.strip().splitlines()[-3:])
        )
    return recs, res


def one(binary: Path, n: int, tokens: int, workers: int, tmp: Path, reader: str) -> dict:
    tag = f"{n}w{workers}{reader}"
    log, chunk_log = tmp / f"fh{tag}.csv", tmp / f"fh{tag}.bin"
    server = [str(binary), "--ttft-ms", "50", "--itl-ms", "20", "--log", str(log),
              "--chunk-log", str(chunk_log), "--exit-after", "600", "--quiet"]  # fmt: skip
    out = tmp / f"run{tag}"
    recs, res = run_request(server, n, tokens, workers, reader, out)
    truth = server_times(log)
    crowded, waits = run_crowded(out), run_server_waits(out, recs)
    # Both clocks are CLOCK_MONOTONIC: the run's zero puts loadgen's stamps on firehose's.
    zero = read_manifest(out).run_start_perf_ns
    assert zero is not None, f"{out}/run.json has no run_start_perf_ns"
    errors, sends, reads, rtts, ttfts, true_ttfts, wires = [], [], [], [], [], [], []
    beyond = silent = own_beyond = own_silent = limited = 0
    for r in recs:  # every one ok (run_request)
        limited += read_flagged(r, crowded, waits.get(r.id))
        server = truth.get(request_number(r.response_id) or -1)
        if server is None or r.t_first_ns is None or r.t_sent_ns is None:
            continue
        arrival, first = server
        err_s = (r.t_first_ns - r.t_sent_ns - (first - arrival)) / 1e9
        errors.append(err_s * 1e3)
        ttfts.append((r.t_first_ns - r.t_sent_ns) / MS)
        true_ttfts.append((first - arrival) / MS)
        sends.append((arrival - zero - r.t_sent_ns) / MS)  # loadgen's send -> firehose's read
        if r.t_written_ns is not None:  # firehose's read - loadgen's write: kernel and server
            wires.append((arrival - zero - r.t_written_ns) / MS)
        reads.append(read_delay_ns(r, zero, first) / MS)
        tol = tolerance_s(r)
        flagged = said_late(r, crowded, waits.get(r.id))
        if err_s > tol:
            beyond += 1
            silent += not flagged
        if reads[-1] / 1e3 > tol:  # the error of loadgen's own stamp, what the flag bounds
            own_beyond += 1
            own_silent += not read_flagged(r, crowded, waits.get(r.id))
        if r.rtt_us is not None:
            rtts.append(r.rtt_us / 1e3)
    if not errors:
        raise SystemExit(f"{tag}: no ok stream joined firehose's log on its response id")
    gaps = [(b - a) / MS for r in recs for a, b in pairwise(r.chunk_ns)]
    sent_gaps = true_gaps(chunk_log)
    q = statistics.quantiles
    return {
        "n": n, "workers": workers, "reader": reader, "ok": len(recs), "matched": len(errors),
        "err50": statistics.median(errors), "err99": q(errors, n=100)[98],
        "ttft50": statistics.median(ttfts), "true_ttft50": statistics.median(true_ttfts),
        "send50": statistics.median(sends), "read50": statistics.median(reads),
        "read99": q(reads, n=100)[98],
        "gap": statistics.median(gaps), "gap99": q(gaps, n=100)[98],
        "true_gap": statistics.median(sent_gaps), "rtt50": statistics.median(rtts) if rtts else nan,
        "gap_mean": statistics.mean(gaps), "true_gap_mean": statistics.mean(sent_gaps),
        "limited": limited,
        "beyond": beyond, "silent": silent,
        "own_beyond": own_beyond, "own_silent": own_silent,
        "banner": any(line.startswith("!! CLIENT LIMITED") for line in res.stdout.splitlines()),
        "exit": res.returncode,
        "wire50": statistics.median(wires) if wires else nan,
        "side": send_side(recs),
    }  # fmt: skip


def send_side(recs: list[StreamRecord]) -> dict:
    """loadgen's own split of the streams' TTFTs (analysis/phases.py's phase_summary), the
    kernel's RTT and the most request bytes it still held at the first byte, and the send
    sides late beyond tolerance by holder."""
    told = [r.tcp_first_byte for r in recs if r.tcp_first_byte is not None]
    return {
        "phases": phase_summary(recs),
        "rtt50_us": statistics.median(t[0] for t in told) if told else nan,
        "held_max": max((t[1] + t[2] for t in told), default=0),
        "late": send_late_by_holder(recs),
    }


def send_side_line(label: str, side: dict, n: int) -> str:
    """One row's send side, for the lines under its table."""
    phases = side["phases"]
    if phases is None:
        return f"{label}: no stream carried phase stamps (aiohttp's reader)"
    med = " ".join(f"{name} {ms:.3f}" for name, ms in phases.p50_ms.items())
    held = ", ".join(f"{who} {k}" for who, k in phases.held_by.items())
    late = ", ".join(f"{who} {k}" for who, k in sorted(side["late"].items())) or "none"
    return (
        f"{label}: phases p50 ms: {med}; kernel RTT p50 {side['rtt50_us']:.0f} us, request"
        f" bytes unsent or unacked at the first byte max {side['held_max']}; send side held by:"
        f" {held} ({phases.stamped} of {n} stamped); late beyond tolerance: {late}"
    )


def truth_rows(
    binary: Path, streams: list[int], tokens: int, workers: list[int], readers: list[str]
) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        return [
            one(binary, n, tokens, w, Path(tmp), reader)
            for reader in readers
            for w in workers
            for n in streams
        ]


def truth_ratios(rows: list[dict]) -> list[Ratio]:
    out = []
    for r in rows:
        at = f"N={r['n']} W={r['workers']} {r['reader']}"
        out.append(ratio(f"loadgen TTFT p50 / firehose's own, {at}", r["ttft50"],
                         r["true_ttft50"], "ms", ".2f"))  # fmt: skip
        # The mean, not the p50: past what one core serves both p50s collapse to 0 (bursts).
        out.append(ratio(f"loadgen chunk gap mean / firehose's sent, {at}", r["gap_mean"],
                         r["true_gap_mean"], "ms", ".2f"))  # fmt: skip
    return out


def loadgen_side(
    n: int, tokens: int, workers: int, reader: str, read_delay_ms: float
) -> list[Ratio]:
    """Without firehose: loadgen's side alone against tests/support/pacedserver.py (same pace),
    every stream ok, its send side split by phase, and the truth rows said unavailable."""
    server = [sys.executable, str(REPO / "tests/support/pacedserver.py"), "--ttft-ms", "50",
              "--itl-ms", "20", "--read-delay-ms", str(read_delay_ms)]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        recs, res = run_request(server, n, tokens, workers, reader, Path(tmp) / "run")
    if len(recs) != n:
        raise SystemExit(f"against tests/support/pacedserver.py: {len(recs)} of {n} streams ok")
    print(f"loadgen request: {n} of {n} streams ok against tests/support/pacedserver.py"
          f" (read delay {read_delay_ms:g} ms), exit {res.returncode}")  # fmt: skip
    print(send_side_line(f"N={n} W={workers} {reader}", send_side(recs), n))
    return [unavailable("loadgen TTFT p50 / firehose's own", "firehose unavailable")]


def truth_table(rows: list[dict], tokens: int) -> str:
    """The table: per row loadgen's TTFT error against firehose's own log, stream by stream
    (joined on the response id), the streams it flagged, and `silent`: streams whose true
    error exceeded their tolerance yet were not flagged (the row passes only with 0)."""
    lines = [
        f"paced firehose (TTFT 50 ms, gaps 20 ms, {tokens} tokens), server on CPU 0,"
        f" {os.cpu_count()} CPUs",
        f"{'reader':>7} {'W':>3} {'N':>5} {'err p50':>8} {'p99':>7} {'send p50':>8}"
        f" {'read p50':>8} {'p99':>6} {'gap p50':>8} {'p99':>6}"
        f" {'true':>6} {'rtt p50':>8} {'flagged':>14} {'beyond tol':>10} {'silent':>6}"
        f" {'read beyond':>11} {'silent':>6} {'exit':>4}",
    ]
    for r in rows:
        lines.append(
            f"{r['reader']:>7} {r['workers']:>3} {r['n']:>5} {r['err50']:>+8.2f}"
            f" {r['err99']:>+7.2f} {r['send50']:>8.2f} {r['read50']:>8.2f} {r['read99']:>6.2f}"
            f" {r['gap']:>8.2f} {r['gap99']:>6.1f} {r['true_gap']:>6.2f}"
            f" {r['rtt50']:>8.3f} {r['limited']:>6} of {r['ok']:<5} {r['beyond']:>10}"
            f" {_silent(r['silent']):>6} {r['own_beyond']:>11} {_silent(r['own_silent']):>6}"
            f" {r['exit']:>4}"
        )
    lines.append(
        "(ms; err = loadgen TTFT - firehose's own TTFT per stream = send (loadgen's send stamp"
        " -> firehose's read) + read (firehose's first chunk -> loadgen's stamp); beyond tol ="
        " streams whose true error > tolerance, silent = of those, not flagged; read beyond ="
        " streams whose own stamp (read) error alone > tolerance;"
        f" exit {CLIENT_LIMITED_EXIT} = --strict saw client_limited)"
    )
    for r in rows:
        label = f"N={r['n']} W={r['workers']} {r['reader']}"
        lines.append(send_side_line(label, r["side"], r["ok"]))
        lines.append(f"{label}: truth send p50 {r['send50']:.3f} ms = loadgen's write"
                     f" {r['send50'] - r['wire50']:.3f} + its write -> firehose's read"
                     f" {r['wire50']:.3f} (kernel and server)")  # fmt: skip
    return "\n".join(lines)


def off_server_core():
    cpus = os.sched_getaffinity(0) - {0}
    return (lambda: os.sched_setaffinity(0, cpus)) if cpus else None


def run_crowded(run_dir: Path) -> bool:
    """Whether the run said its host was crowded (summary.json: measured, or by its client
    processes' count), a flag that covers every stream."""
    summary = orjson.loads((run_dir / "summary.json").read_bytes())
    return summary["run"]["client_limits"]["crowding"] is not None


def run_server_waits(run_dir: Path, recs: list[StreamRecord]) -> dict[str, int]:
    """By stream id, its server's wait for a core between its send and first token as the
    run read it and judged it (each record's server_wait_ns; the analysis'
    stream_server_waits); empty where it read none."""
    host_cpu = (read_manifest(run_dir).client or {}).get("host_cpu", {})
    return stream_server_waits(recs, host_cpu)


def read_flagged(rec: StreamRecord, crowded: bool, server_wait_ns: int | None = None) -> bool:
    """Whether the run says `rec`'s own first-token stamp may be late: a crowded host, or the
    stream client_limited (its bound covers the read; `server_wait_ns`: its server's wait
    for a core around it, run_server_waits). The send side's check speaks of the
    request: against firehose's TTFT 0 its head comes with the first token, so that check
    fired on every late stamp and hid that the read bound missed 88% of them (the ceiling,
    1 worker, 8 in flight, before the two-ticks-back bound of client/selftime.py)."""
    return crowded or client_error_evidence(rec, server_wait_ns) is not None


def read_delay_ns(rec: StreamRecord, zero_ns: int, first_ns: int) -> int:
    """From firehose's first chunk (`first_ns`, its log) to loadgen's stamp of it: the error of
    loadgen's own read. Both clocks are CLOCK_MONOTONIC; the run's zero puts loadgen's stamps
    (t_first_ns of an ok record) on firehose's."""
    assert rec.t_first_ns is not None
    return rec.t_first_ns + zero_ns - first_ns


def said_late(rec: StreamRecord, crowded: bool, server_wait_ns: int | None = None) -> bool:
    """Whether the run says `rec`'s timing may be off: its read may be (read_flagged), or its
    send side was late beyond tolerance (the report's SEND SIDE LATE line, or CLIENT LIMITED
    where loadgen's write held it)."""
    return read_flagged(rec, crowded, server_wait_ns) or send_late_holder(rec) is not None


def _silent(n: int) -> str:
    return "no" if n == 0 else str(n)


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--streams", type=int, nargs="+", default=[256, 1024])
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--workers", type=int, nargs="+", default=sorted({1, os.cpu_count() or 1}))
    ap.add_argument("--out", type=Path, help="also write the table to this file")
    ap.add_argument(
        "--read-delay-ms",
        type=float,
        default=0.0,
        help="run against tests/support/pacedserver.py waiting this long before each read",
    )
    ap.add_argument(
        "--readers",
        nargs="+",
        default=["raw"],
        choices=["raw", "aiohttp"],
        help="the stream readers to run loadgen with (LOADGEN_STREAM_READER)",
    )
    ap.add_argument(
        "--ingest", action="store_true", help="first print client_ingest's table (one report)"
    )
    args = ap.parse_args()
    if args.smoke:
        args.streams, args.tokens, args.workers = [SMOKE_STREAMS], SMOKE_TOKENS, [1]
    if args.ingest:
        print_ingest(ingest(2000, PLAN))
        print()
    # firehose reads at once: a read delay is pacedserver's alone.
    binary = None if args.read_delay_ms else firehose_binary()
    if binary is None:
        report(loadgen_side(args.streams[0], args.tokens, args.workers[0], args.readers[0],
                            args.read_delay_ms), args.ratios)  # fmt: skip
        return
    rows = truth_rows(binary, args.streams, args.tokens, args.workers, args.readers)
    table = truth_table(rows, args.tokens)
    print(table)
    if args.out:
        args.out.write_text(table + "\n")
    report(truth_ratios(rows), args.ratios)


if __name__ == "__main__":
    main()
