"""Several replicas behind one client-side router, on either clock: their /metrics scraped at
the same poll instants (each replica's sample to replica_metrics.jsonl, their totals to
metrics.jsonl, so every analysis of one server reads the fleet unchanged). The wall clock's
client that routes each stream is client/routed.py's RoutedClient.

A replica that stops answering keeps its last scraped counters in the totals (it serves no
more, so they stay where they were; dropping them would make every counter delta across its
death negative) and leaves the gauges (running, waiting, KV use) to those still answering.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import cast

from prometheus_client.metrics_core import Metric

from loadgen.client.routing import RouteSpec
from loadgen.engine.poller import parsed_metrics
from loadgen.exposition import ParsedMetrics
from loadgen.records import MetricsSample
from loadgen.redact import redact_url
from loadgen.run_manifest import ReplicaTargets

Fetch = Callable[[], Awaitable[str | Iterable[Metric]]]
# Shares (0..1) of one server each: the fleet's is their mean over the replicas answering.
SHARE_GAUGES = ("kv_cache_usage_perc", "cache_hit_rate")
# Levels: the fleet's is their sum over the replicas answering.
LEVEL_GAUGES = ("num_requests_running", "num_requests_waiting", "gen_throughput")


def targets_part(urls: Sequence[str], spec: RouteSpec) -> ReplicaTargets:
    """run.json's `targets`: the replicas (a record's `replica` indexes `urls`) and the route."""
    return ReplicaTargets(tuple(redact_url(u) for u in urls), str(spec.policy),
                          spec.prefix_blocks, spec.block_chars)  # fmt: skip


def fleet_values(latest: Sequence[dict[str, float] | None], kept: Sequence[dict[str, float]]
                 ) -> dict[str, float]:  # fmt: skip
    """The fleet's canonical values from each replica's sample now (None: its scrape failed)
    and its last good one: counters summed over every replica's last good values, levels
    summed and shares averaged over the replicas answering now."""
    out: dict[str, float] = {}
    for values in kept:
        for name, v in values.items():
            if name not in SHARE_GAUGES and name not in LEVEL_GAUGES:
                out[name] = out.get(name, 0.0) + v
    answering = [v for v in latest if v is not None]
    for name in LEVEL_GAUGES:
        got = [v[name] for v in answering if name in v]
        if got:
            out[name] = sum(got)
    for name in SHARE_GAUGES:
        got = [v[name] for v in answering if name in v]
        if got:
            out[name] = sum(got) / len(got)
    return out


class FleetScrape:
    """The poller's fetch for several replicas: scrapes them all, writes each one's sample to
    `sink` and answers the fleet's totals (raises only when none answered)."""

    def __init__(
        self, fetches: Sequence[Fetch], sink: Callable[[MetricsSample], None],
        clock: Callable[[], int],
    ) -> None:  # fmt: skip
        self._fetches, self._sink, self._clock = fetches, sink, clock
        self._kept: list[dict[str, float]] = [{} for _ in fetches]

    async def __call__(self) -> ParsedMetrics:
        got = await asyncio.gather(*(self._one(i, f) for i, f in enumerate(self._fetches)))
        parsed = [p for p in got if isinstance(p, ParsedMetrics)]
        if not parsed:
            raise cast(Exception, got[0])  # the poller records it as the sample's error
        latest = [p.values if isinstance(p, ParsedMetrics) else None for p in got]
        pairs = zip(latest, self._kept, strict=True)
        self._kept = [now if now is not None else kept for now, kept in pairs]
        info = next((p.info for p in parsed if p.info), {})
        return ParsedMetrics(fleet_values(latest, self._kept), info)

    async def _one(self, replica: int, fetch: Fetch) -> ParsedMetrics | Exception:
        try:
            parsed = parsed_metrics(await fetch())
        except Exception as exc:  # a replica gone is data: its sample says why
            why = f"{type(exc).__name__}: {exc}"
            self._sink(MetricsSample(self._clock(), {}, error=why, replica=replica))
            return exc
        self._sink(MetricsSample(self._clock(), parsed.values, replica=replica))
        return parsed
