"""How far loadgen's TTFT and chunk gaps are from firehose's truth at N paced streams, and
whether loadgen says so itself (client_limited streams, the banner, the --strict exit code).

firehose (../shared/tools/firehose, built into build/) paces every stream (TTFT 50 ms, 20 ms
gaps) and logs what it actually sent: per request its arrival and first-chunk times, per chunk
its send time (CLOCK_MONOTONIC, the clock of perf_counter_ns). `loadgen request -n N -c N`
runs against it with --strict, in 1 and in 2 worker processes; the table compares p50s of
loadgen's figures with p50s of the truth (the server's own TTFT and gaps), and prints the
client's verdict on itself.

    .venv/bin/python bench/client_truth.py [--streams 64 256 1024] [--tokens 200] [--workers 1 2]

With --ingest it first prints bench/client_ingest.py's table, so one run shows events/s at
C = 1 / 64 / 256 (loadgen, its aiohttp reader, the bare loop, ratios) and the TTFT errors:
`client_truth.py --ingest --streams 256 1024` is issue #14's must-show.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

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

sys.path.insert(0, str(REPO))

import itertools

from loadgen.analysis.selferror import CLIENT_LIMITED_EXIT, error_bound_s, limited_records
from loadgen.records import read_streams

MS = 1e6


def truth(log: Path, chunk_log: Path) -> tuple[float, float]:
    """p50 of the server's own TTFT (arrival -> first chunk sent) and of its chunk gaps, ms."""
    ttfts = []
    for line in log.read_text().splitlines():
        f = line.split(",")
        ttfts.append((int(f[4]) - int(f[3])) / MS)
    sends: dict[int, list[int]] = {}
    raw = chunk_log.read_bytes()
    for rid, _, t in struct.iter_unpack("<IIQ", raw):
        sends.setdefault(rid, []).append(t)
    gaps = [(b - a) / MS for ts in sends.values() for a, b in itertools.pairwise(ts)]
    return statistics.median(ttfts), statistics.median(gaps)


def one(n: int, tokens: int, workers: int, tmp: Path, reader: str) -> dict:
    port = free_port()
    tag = f"{n}w{workers}{reader}"
    log, chunk_log = tmp / f"fh{tag}.csv", tmp / f"fh{tag}.bin"
    cmd = [str(firehose_binary()), "--port", str(port), "--ttft-ms", "50", "--itl-ms", "20",
           "--log", str(log), "--chunk-log", str(chunk_log), "--exit-after", "300",
           "--quiet"]  # fmt: skip
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, preexec_fn=pinned_to(0))
    try:
        wait_listening(port)
        out = tmp / f"run{tag}"
        probe = [str(REPO / ".venv/bin/loadgen"), "request", "--base-url",
                 f"http://127.0.0.1:{port}", "-n", str(n), "-c", str(n), "--max-tokens",
                 str(tokens), "--prompt-tokens", "8", "--out", str(out), "--strict",
                 "--workers", str(workers)]  # fmt: skip
        # One worker is pinned beside the server's core; more spread over all cores.
        pin = pinned_to(1) if workers == 1 else None
        env = {**os.environ, "LOADGEN_STREAM_READER": reader}
        res = subprocess.run(probe, capture_output=True, text=True, preexec_fn=pin, env=env)
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(10)
    recs = [r for r in read_streams(out) if r.status == "ok"]
    ttft = statistics.median((r.t_first_ns - r.t_sent_ns) / MS for r in recs)
    gaps = [(b - a) / MS for r in recs for a, b in zip(r.chunk_ns, r.chunk_ns[1:], strict=False)]
    true_ttft, true_gap = truth(log, chunk_log)
    bounds = [b for r in recs if (b := error_bound_s(r)) is not None]
    return {
        "n": n,
        "workers": workers,
        "reader": reader,
        "ok": len(recs),
        "ttft": ttft,
        "true_ttft": true_ttft,
        "gap": statistics.median(gaps),
        "gap99": statistics.quantiles(gaps, n=100)[98],
        "true_gap": true_gap,
        "limited": len(limited_records(recs)),
        "bound_p50": statistics.median(bounds) * 1e3 if bounds else float("nan"),
        "banner": any(line.startswith("!! CLIENT LIMITED") for line in res.stdout.splitlines()),
        "exit": res.returncode,
    }


def truth_rows(
    streams: list[int], tokens: int, workers: list[int], readers: list[str]
) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        return [
            one(n, tokens, w, Path(tmp), reader)
            for reader in readers
            for w in workers
            for n in streams
        ]


def print_truth(rows: list[dict], tokens: int) -> None:
    print(f"paced firehose (TTFT 50 ms, gaps 20 ms, {tokens} tokens), server on CPU 0")
    head = f"{'reader':>7} {'W':>2} {'N':>5} {'TTFT p50':>9} {'true':>6} {'error':>7}"
    head += f" {'gap p50':>8} {'p99':>6}"
    print(head + f" {'true':>6} {'beyond tol':>15} {'bound p50':>9} {'banner':>6} {'exit':>4}")
    for r in rows:
        print(
            f"{r['reader']:>7} {r['workers']:>2} {r['n']:>5}"
            f" {r['ttft']:>9.1f} {r['true_ttft']:>6.1f}"
            f" {r['ttft'] - r['true_ttft']:>+7.1f}"
            f" {r['gap']:>8.2f} {r['gap99']:>6.1f} {r['true_gap']:>6.2f}"
            f" {r['limited']:>7} of {r['ok']:<5} {r['bound_p50']:>9.1f} {r['banner']!s:>6}"
            f" {r['exit']:>4}"
        )
    print(f"(ms; exit {CLIENT_LIMITED_EXIT} = --strict saw client_limited streams)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
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
    if args.ingest:
        print_ingest(ingest(2000, PLAN))
        print()
    print_truth(truth_rows(args.streams, args.tokens, args.workers, args.readers), args.tokens)


if __name__ == "__main__":
    main()
