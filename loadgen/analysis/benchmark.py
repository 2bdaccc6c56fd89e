"""The benchmark block: the fields a `vllm bench serve` user reads first, per group and in total.

Requests ok and failed, the duration (earliest intended send to last end), request/s, output
and total (prompt + output) tok/s over that duration, and mean / median / p90 / p99 of TTFT,
TPOT, ITL (inter-token gaps, pooled over streams: a chunk's gap spread over its tokens) and
E2E, in ms. Latencies and token totals take the ok streams only, as vLLM's benchmark does;
failed requests are counted, never timed. Every token count names its source: output tokens
the record's token source (usage, server counter, tokenizer or chunk count), prompt tokens
`usage` where the server sent them, else `requested` (the prompt loadgen built to that size).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from loadgen.analysis import rates
from loadgen.analysis.aggregate import span_ns, token_source_of
from loadgen.analysis.stats import describe
from loadgen.codec import from_json
from loadgen.records import StreamRecord

NS = rates.NS
MS_PER_S = 1e3
TOTAL = "total"


@dataclass(frozen=True, slots=True)
class BenchStats:
    """One latency over the ok streams, in ms (None: no stream had it)."""

    mean: float | None
    median: float | None
    p90: float | None
    p99: float | None


BENCH_STATS = tuple(f.name for f in fields(BenchStats))


@dataclass(frozen=True, slots=True)
class BenchFields:
    """The benchmark fields of one group, or of the run in total (module docstring)."""

    requests_ok: int
    requests_failed: int
    duration_s: float | None
    request_per_s: float | None
    output_tokens: int
    prompt_tokens: int
    output_tok_s: float | None
    total_tok_s: float | None
    output_token_source: str | None
    prompt_token_source: str | None
    ttft_ms: BenchStats
    tpot_ms: BenchStats
    itl_ms: BenchStats
    e2e_ms: BenchStats


@dataclass(frozen=True, slots=True)
class Benchmark:
    """summary.json's `benchmark`: the fields per group (sorted by name) and in total."""

    groups: Mapping[str, BenchFields]
    total: BenchFields


def read_benchmark(summary: Mapping[str, Any]) -> Benchmark | None:
    """A run summary's benchmark block; None in a summary older than the block."""
    block = summary.get("benchmark")
    return from_json(Benchmark, block) if block else None


def benchmark_block(measure: list[StreamRecord]) -> Benchmark:
    """Per group (sorted) and in total, the benchmark fields of the measured records."""
    groups = sorted({r.group for r in measure})
    block = {g: bench_fields([r for r in measure if r.group == g]) for g in groups}
    return Benchmark(block, bench_fields(measure))


def bench_fields(records: list[StreamRecord]) -> BenchFields:
    """The benchmark fields of one set of records (module docstring)."""
    ok = [r for r in records if r.status == "ok"]
    span = span_ns(records)
    duration = None if span is None else (span[1] - span[0]) / NS
    output = sum(r.completion_tokens for r in ok)
    prompt = sum(_prompt_tokens(r) or 0 for r in ok)
    return BenchFields(
        requests_ok=len(ok),
        requests_failed=len(records) - len(ok),
        duration_s=duration,
        request_per_s=_per_s(len(ok), duration),
        output_tokens=output,
        prompt_tokens=prompt,
        output_tok_s=_per_s(output, duration),
        total_tok_s=_per_s(output + prompt, duration),
        output_token_source=token_source_of(ok) if ok else None,
        prompt_token_source=_prompt_source(ok),
        ttft_ms=_ms_stats(rates.ttft_s(r) for r in ok),
        tpot_ms=_ms_stats(rates.tpot_s(r) for r in ok),
        itl_ms=_ms_stats(g / NS for r in ok for g in rates.token_gaps_ns(r)),
        e2e_ms=_ms_stats(rates.e2e_s(r) for r in ok),
    )


def _prompt_tokens(rec: StreamRecord) -> int | None:
    return rec.prompt_tokens if rec.prompt_tokens is not None else rec.requested_prompt_tokens


def _prompt_source(ok: list[StreamRecord]) -> str | None:
    sources = sorted(
        {"usage" if r.prompt_tokens is not None else "requested" for r in ok
         if _prompt_tokens(r) is not None}
    )  # fmt: skip
    return "+".join(sources) or None


def _per_s(count: int, duration_s: float | None) -> float | None:
    return count / duration_s if duration_s else None


def _ms_stats(seconds: Iterable[float | None]) -> BenchStats:
    d = describe(None if s is None else s * MS_PER_S for s in seconds)
    return BenchStats(d["mean"], d["median"], d["p90"], d["p99"])
