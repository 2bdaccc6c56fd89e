"""The benchmark block (analysis/benchmark.py) as two tables: throughput and latency, a row per
group and one for the total, with every token count's source named; and, where
`--metric-percentiles` asked, the percentiles read from the histograms, a row per group."""

from __future__ import annotations

from dataclasses import astuple
from typing import Any

from loadgen.analysis.benchmark import BENCH_STATS, TOTAL, BenchFields, Benchmark, BenchStats
from loadgen.analysis.hist import PERCENTILE_HISTS, percentile_key
from loadgen.report.tables import DASH, Table, num, rate, secs


def benchmark_tables(block: Benchmark | None) -> list[Table]:
    """Throughput and latency tables of a summary's `benchmark` block (none for an old one)."""
    if block is None:
        return []
    rows = [*sorted(block.groups.items()), (TOTAL, block.total)]
    if len(rows) == 2:  # one group: its row is the total
        rows = rows[1:]
    return [_throughput(rows), _latency(rows)]


def _throughput(rows: list[tuple[str, BenchFields]]) -> Table:
    cells = tuple(
        (name, str(b.requests_ok), str(b.requests_failed), secs(b.duration_s),
         num(b.request_per_s, 2), rate(b.output_tok_s), rate(b.total_tok_s),
         b.output_token_source or DASH, b.prompt_token_source or DASH)
        for name, b in rows
    )  # fmt: skip
    return Table(
        "Benchmark (measure phase; `vllm bench serve` fields)",
        ("group", "ok", "failed", "duration s", "req/s", "output tok/s", "total tok/s",
         "output tokens from", "prompt tokens from"),
        cells,
        ("duration: first intended send to last end; total = prompt + output tokens",
         "prompt tokens from usage where the server sent them, else as requested"),
        left=frozenset({0, 7, 8}),
    )  # fmt: skip


def _latency(rows: list[tuple[str, BenchFields]]) -> Table:
    cells = tuple(
        (name, _stats(b.ttft_ms), _stats(b.tpot_ms), _stats(b.itl_ms), _stats(b.e2e_ms))
        for name, b in rows
    )
    return Table(
        "Benchmark latency, ms: " + " / ".join(BENCH_STATS) + " (ok streams)",
        ("group", "TTFT", "TPOT", "ITL", "E2E"),
        cells,
        ("ITL: gaps between tokens, a chunk's gap spread over the tokens it carried",),
    )


def _stats(s: BenchStats) -> str:
    return "/".join(num(v) for v in astuple(s))


def percentile_table(summary: dict[str, Any]) -> Table | None:
    """summary.json's `percentiles` (asked by --metric-percentiles): a row per group and
    figure, and the total's, a column per percentile; None where they were not asked."""
    block = summary.get("percentiles")
    if not block:
        return None
    groups = summary.get("groups") or {}
    rows = [(g, v["percentiles"]) for g, v in sorted(groups.items()) if "percentiles" in v]
    rows = [*rows, (TOTAL, block["total"])] if len(rows) != 1 else rows
    keys = [percentile_key(p) for p in block["asked"]]
    cells = tuple(
        (name, figure.removesuffix("_ms").upper(), *(num(table[figure][k], 2) for k in keys))
        for name, table in rows
        for figure in PERCENTILE_HISTS
    )
    return Table(
        "Percentiles, ms (measure phase; from the HDR histograms, 3 significant digits)",
        ("group", "metric", *keys),
        cells,
        ("TTFT and E2E from the actual send; ITL per token; every measured stream, failed ones "
         "too, as hist/*.hlog holds them",),
        left=frozenset({0, 1}),
    )  # fmt: skip


def seat_wait_table(summary: dict[str, Any]) -> Table | None:
    """Per group under a seat cap: the streams that waited for a seat, and how long; None
    where no group had a cap."""
    groups = summary.get("groups") or {}
    rows = tuple(
        (g, str(w["waited"]), str(w["capped"]), num(w["ms"]["median"], 2),
         num(w["ms"]["p90"], 2), num(w["ms"]["max"], 2))
        for g, v in sorted(groups.items())
        if (w := v.get("seat_wait")) is not None
    )  # fmt: skip
    if not rows:
        return None
    return Table(
        "Seat waits (arrival concurrency cap), ms: every capped stream, 0 where a seat was free",
        ("group", "waited", "of", "median", "p90", "max"),
        rows,
        ("a wait is the arrival's time before a seat freed: not lateness, not part of TTFT",),
    )
