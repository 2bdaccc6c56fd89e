"""loadgen's own /metrics (`--metrics-port`): what a wall-clock run is doing now, in Prometheus
exposition under `loadgen_` names, served on 127.0.0.1 from a thread of its own for as long as
the command runs (every arm, boot and search step of it on one registry, so counters never reset).

Nothing here runs per SSE event: a stream is counted when it is sent and when its record
comes back (its TTFT, inter-token gaps, lateness and outcome read off the record then), so the
client's read loop is exactly what it was without it. Records reach the parent the same way
whoever sent them: the parent's own client, or a worker process / Ray actor whose records the
pool hands on as each stream ends (client/pool.py); a worker's stream is counted as sent
when its record arrives, since workers report only ends.

Every figure is kept under one lock and written out by one collector, so one scrape is one
consistent snapshot: a histogram's `_count` equals the streams it counted at that instant.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from loadgen.analysis.rates import decode_tokens, ttft_s
from loadgen.client.lag import LoopLagMonitor
from loadgen.client.loops import Backend
from loadgen.engine.target import RunError
from loadgen.records import RecordSink, StreamRecord
from loadgen.request import StreamRequest

NS = 1_000_000_000
# Bucket bounds in seconds. TTFT spans a cached 10 ms prefill to a queued 72k-token prompt's
# minutes; ITL a speculative step's ~1 ms to a preempted stream's seconds; loop lag and
# dispatch lateness start under the 1 ms at which a run is judged client-limited.
TTFT_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
ITL_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1,
                 2.5)  # fmt: skip
LAG_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)


class MetricsPortInUse(RunError):
    """--metrics-port names a port something else holds; the message is one line."""


@dataclass
class _Histogram:
    """Prometheus histogram counts (per bucket, not yet cumulative) and sum, in ns."""

    bounds_ns: np.ndarray
    counts: np.ndarray = field(init=False)
    sum_ns: float = 0.0

    def __post_init__(self) -> None:
        self.counts = np.zeros(len(self.bounds_ns) + 1, dtype=np.int64)

    @classmethod
    def of(cls, bounds_s: Iterable[float]) -> _Histogram:
        return cls(np.asarray([round(b * NS) for b in bounds_s], dtype=np.float64))

    def add(self, values_ns: Iterable[float], weights: np.ndarray | None = None) -> None:
        """Counts each value (`weights[i]` times where given)."""
        values = np.asarray(values_ns, dtype=np.float64)
        if values.size:
            # side="left": a value equal to a bound belongs to that bucket (Prometheus' `le`).
            where = np.searchsorted(self.bounds_ns, values, side="left")
            counts = np.bincount(where, weights=weights, minlength=len(self.counts))
            self.counts += counts.astype(np.int64)
            self.sum_ns += float(values @ weights if weights is not None else values.sum())

    def buckets(self) -> list[tuple[str, float]]:
        """(le, cumulative count) pairs, +Inf last, as HistogramMetricFamily takes them."""
        cumulative = np.cumsum(self.counts)
        les = [f"{b / NS:g}" for b in self.bounds_ns] + ["+Inf"]
        return [(le, float(n)) for le, n in zip(les, cumulative, strict=True)]


class LiveMetrics(Collector):
    """The run's figures, updated at each send and each record (`watch`, `see`), written out
    at each scrape (`collect`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.in_flight = 0
        self.sent = 0
        self._ok: dict[str, int] = {}
        self._failed: dict[tuple[str, str], int] = {}
        self._ttft: dict[str, _Histogram] = {}
        self._itl: dict[str, _Histogram] = {}
        self._late: dict[str, _Histogram] = {}
        self._lag = _Histogram.of(LAG_BUCKETS_S)
        self._lag_source: LoopLagMonitor | None = None
        self._lag_seen = 0

    def watch(self, backend: Backend) -> Backend:
        """`backend`, counting each stream sent through it while it is in flight."""
        return _Watched(backend, self)

    def started(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.sent += 1

    def left(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def sent_elsewhere(self, on_record: RecordSink) -> RecordSink:
        """`on_record` for records of streams a worker sent: each counts as sent on arrival."""

        def counted(rec: StreamRecord, line: bytes | None = None) -> None:
            with self._lock:
                self.sent += 1
            on_record(rec, line)

        return counted

    def see(self, rec: StreamRecord) -> None:
        """Counts a finished stream: its outcome, TTFT, inter-token gaps and lateness."""
        ttft = ttft_s(rec)
        gaps, weights = _token_gaps(rec)
        with self._lock:
            if rec.error is None:
                self._ok[rec.group] = self._ok.get(rec.group, 0) + 1
            else:
                key = (rec.group, rec.error.cls)
                self._failed[key] = self._failed.get(key, 0) + 1
            if ttft is not None:
                _get(self._ttft, rec.group, TTFT_BUCKETS_S).add([ttft * NS])
            _get(self._itl, rec.group, ITL_BUCKETS_S).add(gaps, weights)
            if rec.t_sent_ns is not None:
                late = max(rec.t_sent_ns - rec.t_intended_ns, 0)
                _get(self._late, rec.group, LAG_BUCKETS_S).add([late])

    def recording(self, on_record: RecordSink) -> RecordSink:
        """`on_record`, each record counted first."""

        def counted(rec: StreamRecord, line: bytes | None = None) -> None:
            self.see(rec)
            on_record(rec, line)

        return counted

    def lag_from(self, monitor: LoopLagMonitor) -> None:
        """Reads loop lag from `monitor` from now on (an arm's own), the last one's folded in."""
        with self._lock:
            self._fold_lag()
            self._lag_source, self._lag_seen = monitor, 0

    def _fold_lag(self) -> None:
        # The monitor only appends (from the loop's thread): a slice up to a length read once
        # is a stable read under the GIL.
        if self._lag_source is not None:
            lags = self._lag_source.lags_ns
            end = len(lags)
            self._lag.add(lags[self._lag_seen : end])
            self._lag_seen = end

    def collect(self) -> Iterator[Metric]:
        # Written out whole under the lock (one snapshot), and handed over after it: a
        # generator yielding under it would hold the loop's updates for as long as a
        # scraper took to read.
        with self._lock:
            self._fold_lag()
            families = list(self._families())
        return iter(families)

    def _families(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "loadgen_streams_in_flight", "Measured streams sent and not yet ended (this process's "
            "client; a worker's are not seen until they end).", value=self.in_flight,
        )  # fmt: skip
        yield CounterMetricFamily("loadgen_streams_sent", "Measured streams sent.", self.sent)
        ok = CounterMetricFamily("loadgen_streams_ok", "Streams ended without error.",
                                 labels=["group"])  # fmt: skip
        for group, n in sorted(self._ok.items()):
            ok.add_metric([group], n)
        yield ok
        failed = CounterMetricFamily(
            "loadgen_streams_failed", "Streams ended with an error, by its class "
            "(client/errors.py).", labels=["group", "class"],
        )  # fmt: skip
        for (group, cls), n in sorted(self._failed.items()):
            failed.add_metric([group, cls], n)
        yield failed
        yield _family("loadgen_ttft_seconds", "Time to first token from the actual send.",
                      self._ttft)  # fmt: skip
        yield _family("loadgen_itl_seconds", "Inter-token latency (a chunk's gap spread over "
                      "its tokens).", self._itl)  # fmt: skip
        yield _family("loadgen_dispatch_late_seconds", "How late each stream was sent against "
                      "its schedule.", self._late)  # fmt: skip
        lag = HistogramMetricFamily("loadgen_loop_lag_seconds", "The client event loop's lag "
                                    "while streams were timed (10 ms ticks).")  # fmt: skip
        lag.add_metric([], self._lag.buckets(), self._lag.sum_ns / NS)
        yield lag


def _token_gaps(rec: StreamRecord) -> tuple[np.ndarray, np.ndarray | None]:
    """analysis/rates.py's token_gaps_ns as values and counts (a chunk's gap over its k tokens,
    counted k times), vectorized: token_gaps_ns's lists took 1.1 ms of the parent's loop per
    2,000-token stream end, this 0.16-0.23 ms (same busy 2-core box)."""
    gaps = np.diff(np.asarray(rec.chunk_ns, dtype=np.float64))
    if not gaps.size:
        return gaps, None
    if rec.chunk_tokens:
        k = np.asarray(rec.chunk_tokens[1 : gaps.size + 1], dtype=np.float64)
        kept = k > 0
        return gaps[: k.size][kept] / k[kept], k[kept]
    per_gap = decode_tokens(rec) / gaps.size
    return (gaps / per_gap, None) if per_gap > 0 else (gaps[:0], None)


def _get(hists: dict[str, _Histogram], group: str, bounds_s: tuple[float, ...]) -> _Histogram:
    if group not in hists:
        hists[group] = _Histogram.of(bounds_s)
    return hists[group]


def _family(name: str, doc: str, hists: dict[str, _Histogram]) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc, labels=["group"])
    for group, hist in sorted(hists.items()):
        family.add_metric([group], hist.buckets(), hist.sum_ns / NS)
    return family


class _Watched:
    def __init__(self, backend: Backend, live: LiveMetrics) -> None:
        self._backend = backend
        self._live = live

    async def stream(self, req: StreamRequest) -> StreamRecord:
        self._live.started()
        try:
            return await self._backend.stream(req)
        finally:
            self._live.left()


@contextmanager
def serving(port: int) -> Iterator[LiveMetrics]:
    """LiveMetrics on http://127.0.0.1:`port`/metrics until the block ends; MetricsPortInUse
    when the port cannot be bound."""
    live = LiveMetrics()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(live)
    try:
        server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    except OSError as exc:
        raise MetricsPortInUse(
            f"--metrics-port {port}: 127.0.0.1:{port} cannot be bound ({exc.strerror or exc}); "
            "pick a free port or stop what holds it"
        ) from None
    try:
        yield live
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
