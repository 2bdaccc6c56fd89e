"""Server metrics on the run clock: scrape /metrics every interval into metrics.jsonl.

Servers name the same gauge differently; everything is mapped onto vLLM v1's names (without the
`vllm:` prefix, see records.CANONICAL_METRICS) so analysis reads one vocabulary. The poller gets
the exposition text from a callable, so it knows nothing of HTTP.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from loadgen.records import MetricsSample

# Sample name as the server exports it -> canonical name. Values of label sets are summed
# (one engine per label set), except info metrics, which are read as facts.
ALIASES: dict[str, str] = {
    # vLLM v1
    "vllm:num_requests_running": "num_requests_running",
    "vllm:num_requests_waiting": "num_requests_waiting",
    "vllm:kv_cache_usage_perc": "kv_cache_usage_perc",
    "vllm:num_preemptions_total": "num_preemptions_total",
    "vllm:prompt_tokens_total": "prompt_tokens_total",
    "vllm:generation_tokens_total": "generation_tokens_total",
    "vllm:prefix_cache_queries_total": "prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total": "prefix_cache_hits_total",
    "vllm:spec_decode_num_drafts_total": "spec_decode_num_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total": "spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total": "spec_decode_num_accepted_tokens_total",
    "vllm:iteration_tokens_total_sum": "iteration_tokens_total_sum",
    "vllm:iteration_tokens_total_count": "iteration_tokens_total_count",
    "vllm:time_to_first_token_seconds_sum": "time_to_first_token_seconds_sum",
    "vllm:time_to_first_token_seconds_count": "time_to_first_token_seconds_count",
    "vllm:inter_token_latency_seconds_sum": "inter_token_latency_seconds_sum",
    "vllm:inter_token_latency_seconds_count": "inter_token_latency_seconds_count",
    # vLLM v0
    "vllm:gpu_cache_usage_perc": "kv_cache_usage_perc",
    "vllm:gpu_prefix_cache_queries_total": "prefix_cache_queries_total",
    "vllm:gpu_prefix_cache_hits_total": "prefix_cache_hits_total",
    # SGLang, as python/sglang/srt/observability/metrics_collector.py (0.5.23) names them.
    # Its token counters move when a request FINISHES (observe_one_finished_request), not per
    # step as vLLM's do: generation tokens get their own name, so a joint-decode window (which
    # closes at the first finish) never reads a counter that could not have moved inside it.
    # Prompt tokens and cached tokens are read only over long windows (soak thirds) or after
    # a probe has finished (the warm check), where counting at the finish is exact.
    "sglang:num_running_reqs": "num_requests_running",
    "sglang:num_queue_reqs": "num_requests_waiting",
    "sglang:token_usage": "kv_cache_usage_perc",  # used / max_total_num_tokens, 0..1
    "sglang:prompt_tokens_total": "prompt_tokens_total",
    "sglang:generation_tokens_total": "finished_generation_tokens_total",
    "sglang:cached_tokens_total": "prefix_cache_hits_total",  # summed over cache_source
    "sglang:num_retracted_requests_total": "num_preemptions_total",
    "sglang:cache_hit_rate": "cache_hit_rate",
    "sglang:gen_throughput": "gen_throughput",
    # llama.cpp
    "llamacpp:requests_processing": "num_requests_running",
    "llamacpp:requests_deferred": "num_requests_waiting",
    "llamacpp:kv_cache_usage_ratio": "kv_cache_usage_perc",
    "llamacpp:prompt_tokens_total": "prompt_tokens_total",
    "llamacpp:tokens_predicted_total": "generation_tokens_total",
}

INFO_METRICS = ("vllm:cache_config_info",)


@dataclass(frozen=True, slots=True)
class ParsedMetrics:
    values: dict[str, float]
    # Labels of info metrics (e.g. cache_config_info's block_size), keyed by metric name.
    info: dict[str, dict[str, str]]


def parse_exposition(text: str) -> ParsedMetrics:
    """Canonical values and info labels from Prometheus text exposition."""
    return parse_families(text_string_to_metric_families(text))


def parse_families(families: Iterable[Metric]) -> ParsedMetrics:
    """Canonical values and info labels from metric families: parsed from text, or straight
    from a collector in the same process (the virtual sim: no text to build and parse)."""
    values: dict[str, float] = {}
    info: dict[str, dict[str, str]] = {}
    for family in families:
        for sample in family.samples:
            if sample.name in INFO_METRICS:
                info[sample.name.split(":", 1)[1]] = dict(sample.labels)
                continue
            canonical = ALIASES.get(sample.name)
            if canonical is not None:
                values[canonical] = values.get(canonical, 0.0) + sample.value
    return ParsedMetrics(values, info)


class MetricsPoller:
    """Scrapes every `interval_s` on an absolute schedule and hands each sample to `sink`.

    A server without /metrics gives one warning (via `warn`) and the run goes on; failed
    scrapes are recorded as samples with `error` set, so gaps in the timeline are visible.
    """

    def __init__(
        self,
        fetch: Callable[[], Awaitable[str | Iterable[Metric]]],
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
        try:
            got = await self._fetch()
            parsed = parse_exposition(got) if isinstance(got, str) else parse_families(got)
        except Exception as exc:  # any scrape failure is data, not a crash
            self.failures += 1
            if self.failures == 1:
                self._warn(f"metrics: scrape failed ({exc}); continuing without server metrics")
            sample = MetricsSample(self._now(), {}, error=f"{type(exc).__name__}: {exc}")
        else:
            self.info.update(parsed.info)
            sample = MetricsSample(self._now(), parsed.values)
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
