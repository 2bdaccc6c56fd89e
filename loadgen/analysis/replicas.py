"""Several replicas behind the client's router: per replica its load, TTFT, verdicts and prefix
hit rate (from its own /metrics, replica_metrics.jsonl), the total beside them, and when a
replica failed.

A replica is taken as failed at the end of the first measured stream on it that ended in a
transport error (`DOWN_CLASSES`: refused, timed out connecting, or cut mid-stream) after which
it completed no stream: an HTTP error status or a timeout is the server answering, slowly or
with a refusal, and a dropped stream it outlived (a flaky link, an injected drop) is no death.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadgen.analysis.aggregate import server_window, span_ns
from loadgen.analysis.timeline import Timeline
from loadgen.records import MetricsSample, StreamRecord
from loadgen.run_manifest import ReplicaTargets

NS = 1_000_000_000
DOWN_CLASSES = ("connect_error", "connect_timeout", "connection_closed")


@dataclass(frozen=True, slots=True)
class ReplicaRow:
    """One replica's measured streams (or every replica's: `replica` None), in the run's
    window: streams sent to it, ok ones and errors by class, ok requests/s over the run's
    span, TTFT p50/p90 of its ok streams, its verdicts, its prefix hit rate (its counters'
    deltas over the run's span; None without them), and when it failed, with the class."""

    replica: int | None
    url: str
    streams: int
    ok: int
    errors: dict[str, int]
    ok_req_s: float | None
    ttft_p50_ms: float | None
    ttft_p90_ms: float | None
    verdicts: dict[str, int]
    prefix_hit_rate: float | None
    failed_at_s: float | None
    failed_class: str | None


@dataclass(frozen=True, slots=True)
class ReplicasBlock:
    """summary.json's `replicas`: the route, one row per replica in target order, the total."""

    route: str
    prefix_blocks: int
    block_chars: int
    rows: tuple[ReplicaRow, ...]
    total: ReplicaRow


def replicas_block(
    targets: ReplicaTargets | None,
    measure: Sequence[StreamRecord],
    rows: dict[str, dict[str, Any]],
    replica_metrics: Sequence[MetricsSample],
    total_server: dict[str, Any],
) -> ReplicasBlock | None:
    """The per-replica table of a run with run.json `targets`, else None; `rows` are the
    measured streams' summary rows (their TTFT and verdict), `total_server` the run's
    server window (its prefix hit rate is the total's)."""
    if targets is None:
        return None
    urls = targets.urls
    span = span_ns(list(measure))
    per = [
        _row(i, url, [r for r in measure if r.replica == i], rows, span,
             _hit_rate([s for s in replica_metrics if s.replica == i], span))
        for i, url in enumerate(urls)
    ]  # fmt: skip
    hit = total_server.get("prefix_hit_rate") if total_server.get("available") else None
    total = _row(None, "total", list(measure), rows, span, hit)
    return ReplicasBlock(
        route=targets.route,
        prefix_blocks=targets.prefix_blocks,
        block_chars=targets.block_chars,
        rows=tuple(per),
        total=total,
    )


def _hit_rate(samples: list[MetricsSample], span: tuple[int, int] | None) -> float | None:
    if span is None:
        return None
    window = server_window(Timeline(samples), *span)
    return window.get("prefix_hit_rate") if window.get("available") else None


def _row(
    replica: int | None,
    url: str,
    recs: list[StreamRecord],
    rows: dict[str, dict[str, Any]],
    span: tuple[int, int] | None,
    hit_rate: float | None,
) -> ReplicaRow:
    ok = [r for r in recs if r.status == "ok"]
    ttft = [rows[r.id]["ttft_s"] for r in ok if rows[r.id]["ttft_s"] is not None]
    failed = None if replica is None else _failure(recs)
    seconds = None if span is None else (span[1] - span[0]) / NS
    return ReplicaRow(
        replica=replica,
        url=url,
        streams=len(recs),
        ok=len(ok),
        errors=dict(sorted(Counter(r.error.cls for r in recs if r.error is not None).items())),
        ok_req_s=len(ok) / seconds if seconds else None,
        ttft_p50_ms=_ms(ttft, 50),
        ttft_p90_ms=_ms(ttft, 90),
        verdicts=dict(sorted(Counter(rows[r.id]["verdict"] for r in recs).items())),
        prefix_hit_rate=hit_rate,
        failed_at_s=None if failed is None else failed[0] / NS,
        failed_class=None if failed is None else failed[1],
    )


def _failure(recs: list[StreamRecord]) -> tuple[int, str] | None:
    """(when, class) of the first transport error after the replica's last ok stream ended."""
    last_ok = max((r.t_done_ns for r in recs if r.status == "ok" and r.t_done_ns is not None),
                  default=-1)  # fmt: skip
    down = sorted((r.t_done_ns, r.error.cls) for r in recs if r.t_done_ns is not None
                  and r.t_done_ns >= last_ok and r.error is not None
                  and r.error.cls in DOWN_CLASSES)  # fmt: skip
    return down[0] if down else None


def _ms(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) * 1000 if values else None
