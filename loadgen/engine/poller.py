"""Server metrics on the run clock: scrape /metrics every interval into metrics.jsonl.

Servers name the same gauge differently; loadgen/exposition.py maps them onto one vocabulary.
The poller gets the exposition text (or a collector's families) from a callable, so it knows
nothing of HTTP.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable

from prometheus_client.metrics_core import Metric

from loadgen.exposition import ParsedMetrics, parse_exposition, parse_families
from loadgen.records import MetricsSample


class MetricsPoller:
    """Scrapes every `interval_s` on an absolute schedule and hands each sample to `sink`.

    A server without /metrics gives one warning (via `warn`) and the run goes on; failed
    scrapes are recorded as samples with `error` set, so gaps in the timeline are visible.
    """

    def __init__(
        self,
        fetch: Callable[[], Awaitable[str | Iterable[Metric] | ParsedMetrics]],
        sink: Callable[[MetricsSample], None],
        *,
        interval_s: float,
        run_start_ns: int,
        warn: Callable[[str], None] = lambda msg: None,
        clock: Callable[[], int] | None = None,
        on_sample: Callable[[int], Awaitable[None]] | None = None,
    ) -> None:
        self._fetch = fetch
        # GPU telemetry is read at the same instants (engine/telemetry.py), on the same clock.
        self._on_sample = on_sample
        # A virtual run reads its own clock (run-clock ns); run() is for the wall clock only.
        self._clock = clock
        self._sink = sink
        self._interval_ns = int(interval_s * 1e9)
        self._run_start_ns = run_start_ns
        self._warn = warn
        self.info: dict[str, dict[str, str]] = {}
        self.last: MetricsSample | None = None
        self.failures = 0

    async def scrape_once(self) -> MetricsSample:
        asked = self._now()
        try:
            got = await self._fetch()
            parsed = parsed_metrics(got)
        except Exception as exc:  # any scrape failure is data, not a crash
            self.failures += 1
            if self.failures == 1:
                self._warn(f"metrics: scrape failed ({exc}); continuing without server metrics")
            sample = MetricsSample(self._now(), {}, error=f"{type(exc).__name__}: {exc}")
        else:
            self.info.update(parsed.info)
            t_ns = self._now()
            # A virtual scrape takes no time: its one instant is t_ns alone.
            sample = MetricsSample(t_ns, parsed.values, t_asked_ns=asked if asked < t_ns else None)
        self.last = sample
        if self._on_sample is not None:
            # Before the sink: its write can take ms under load, and an energy counter read
            # that late is stamped early (2 J off of 380 J on a loaded 2-core machine).
            await self._on_sample(sample.t_ns)
        self._sink(sample)
        return sample

    async def run(self) -> None:
        """Polls until cancelled; ticks are absolute so a slow scrape does not shift the grid."""
        next_ns = time.perf_counter_ns()
        while True:
            await self.scrape_once()
            next_ns += self._interval_ns
            delay = (next_ns - time.perf_counter_ns()) / 1e9
            if delay < 0:  # fell behind: skip missed ticks rather than burst
                next_ns = time.perf_counter_ns()
                delay = 0
            await asyncio.sleep(delay)

    def _now(self) -> int:
        if self._clock is not None:
            return self._clock()
        return time.perf_counter_ns() - self._run_start_ns


def parsed_metrics(got: str | Iterable[Metric] | ParsedMetrics) -> ParsedMetrics:
    """A fetch's answer as canonical values: exposition text, a collector's families, or
    values already parsed (several replicas' totals, engine/replicas.py)."""
    if isinstance(got, ParsedMetrics):
        return got
    return parse_exposition(got) if isinstance(got, str) else parse_families(got)
