"""The benchmark block (analysis/benchmark.py) as two tables: throughput and latency, a row per
group and one for the total, with every token count's source named."""

from __future__ import annotations

from dataclasses import astuple

from loadgen.analysis.benchmark import BENCH_STATS, TOTAL, BenchFields, Benchmark, BenchStats
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
