"""`loadgen request`'s report, from the run directory it just wrote: the client banner, a row
per shown stream, the spread over the ok ones, TTFO where streams reasoned (the run report's
table, from the same summary), and the benchmark block every run's report ends with."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.analysis.benchmark import benchmark_block
from loadgen.analysis.inputs import load_run
from loadgen.analysis.rates import decode_tok_s, ttft_s
from loadgen.analysis.selferror import error_bound_s
from loadgen.analysis.stats import median
from loadgen.analysis.summary import analyze, write_summary
from loadgen.analysis.summary_types import read_run
from loadgen.records import StreamRecord
from loadgen.redact import redact_url
from loadgen.report.banners import client_banner
from loadgen.report.bench_tables import benchmark_tables
from loadgen.report.sections import reasoning_table, replicas_table
from loadgen.report.tables import Table, count, msecs, rate
from loadgen.report.text import render_rich


@dataclass(frozen=True, slots=True)
class RequestReport:
    """What `loadgen request` prints: the client banner (None: quiet), its tables under a
    head line, whether loadgen's own timing limited the run (`--strict` exits 3 on it), and
    the streams that finished (a stop cut the rest short)."""

    banner: str | None
    text: str
    client_limited: bool
    finished: int


def request_report(
    run_dir: Path,
    *,
    api: str,
    prompt_tokens: int,
    per_stream: bool,
    width: int,
) -> RequestReport:
    """Analyses the run directory as `loadgen report` does (so the banner, a crowded host's
    included, is the report's) and writes its summary.json."""
    inputs = load_run(run_dir)
    summary = analyze(inputs).summary
    write_summary(run_dir, summary)
    run = read_run(summary)
    limits = run.client_limits
    assert limits is not None  # a request is one run, never a sweep
    sizing = (
        "exact, sized by /tokenize"
        if run.token_counter == "tokenize"
        else "estimated: no /tokenize"
    )
    replicas = summary.get("replicas")
    # Routed over several, the first URL alone read as the whole target.
    where = (f"{len(replicas['rows'])} replicas (route {replicas['route']})" if replicas
             else redact_url(run.target.url or ""))  # fmt: skip
    head = f"{where}  model {run.model}  api {api}  prompt ~{prompt_tokens} tokens ({sizing})"
    records = inputs.streams
    tables = request_tables(records, summary, per_stream=per_stream)
    finished = sum(r.error is None or r.error.cls != "cancelled" for r in records)
    return RequestReport(client_banner(limits), render_rich(tables, [head], width=width),
                         limits.limits_run, finished)  # fmt: skip


STREAM_COLUMNS = (
    "stream", "status", "TTFT ms", "RTT ms", "decode tok/s", "prompt", "tokens", "chunks",
    "token source", "client err ms", "error",
)  # fmt: skip


def request_tables(
    records: list[StreamRecord], summary: dict[str, Any], *, per_stream: bool
) -> list[Table]:
    """Rows for every stream when `per_stream`, else for the failed ones only (2,048 rows on an
    H200 buried the summary), then the spread over ok streams, the reasoning table of the
    records' `summary` (TTFO beside TTFT) and the benchmark block."""
    shown = [r for r in records if per_stream or r.status != "ok"]
    tables = [stream_table(shown)] if shown else []
    ok = [r for r in records if r.status == "ok"]
    if ok:
        tables.append(spread_table(ok))
        reasoning = reasoning_table(summary)
        tables += [reasoning] if reasoning is not None else []
        tables += benchmark_tables(benchmark_block(records))
    # Which replica failed when: said only by a later `loadgen report`, never by request.
    replicas = replicas_table(summary)
    return tables + ([] if replicas is None else [replicas])


def stream_table(records: list[StreamRecord]) -> Table:
    """One row per stream, in the order summary.json lists them (intended send time, then id:
    a plan's ids end in an unpadded index, so `.../10` sorts before `.../2` by id alone)."""
    # RTT beside TTFT: the kernel's smoothed round trip of the stream's connection, the
    # network's share, so a reader can tell server time from transit.
    rows = tuple(_stream_row(r) for r in sorted(records, key=lambda r: (r.t_intended_ns, r.id)))
    return Table("Streams", STREAM_COLUMNS, rows, left=frozenset({0, 1, 8, 10}))


def _stream_row(r: StreamRecord) -> tuple[str, ...]:
    t, bound = ttft_s(r), error_bound_s(r)
    return (
        r.id,
        r.status,
        msecs(None if t is None else t * 1e3),
        msecs(None if r.rtt_us is None else r.rtt_us / 1e3),
        rate(decode_tok_s(r)),
        count(r.prompt_tokens),
        str(r.completion_tokens),
        str(r.chunks),
        r.token_source + (" (chunks!)" if r.token_source == "chunk_count" else ""),
        msecs(None if bound is None else bound * 1e3),
        f"{r.error.cls}: {r.error.message}" if r.error else "",
    )


def spread_table(ok: list[StreamRecord]) -> Table:
    """min / median / max of TTFT, RTT, decode-only rate, tokens and chunks over ok streams."""
    series = (
        ("TTFT ms", msecs, [t * 1e3 for r in ok if (t := ttft_s(r)) is not None]),
        ("RTT ms", msecs, [r.rtt_us / 1e3 for r in ok if r.rtt_us is not None]),
        ("decode tok/s", rate, [d for r in ok if (d := decode_tok_s(r)) is not None]),
        ("tokens", count, [float(r.completion_tokens) for r in ok]),
        ("chunks", count, [float(r.chunks) for r in ok]),
    )
    rows = tuple(
        (name, fmt(min(xs)), fmt(median(xs)), fmt(max(xs))) for name, fmt, xs in series if xs
    )
    return Table(f"Spread over {len(ok)} ok streams", ("over ok streams", "min", "median", "max"),
                 rows)  # fmt: skip
