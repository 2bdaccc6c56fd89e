"""/metrics for the sim in vLLM v1's names, types and labels (vllm/v1/metrics/loggers.py).

A prometheus_client Collector reads the engine's counters at scrape time, so the exposition is
always consistent with the engine's state at that instant and no second copy of a counter is
kept. Histograms are folded incrementally from the engine's sample lists.

`iteration_tokens_total` observes what vLLM v1's does: only steps that emit a token (a chunk
of a prefill still under way is not one), a prompt counted whole at its first token.

Differences from vLLM, on purpose: `time_to_first_token_seconds` is in engine seconds (model time;
equal to wall time at speed 1), `admission_rejections` counts `max_waiting` refusals (HTTP 503),
and `request_success` counts aborts (client gone, dropped stream) under finished_reason="abort".
Like vLLM, the spec-decode families exist only when speculation is configured.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterator, Sequence

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from loadgen.sim.engine import Engine, EngineConfig

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# vLLM's bucket edges, copied so histograms from the sim and vLLM can be merged and compared.
ITERATION_TOKENS_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
FINISH_REASONS = ("stop", "length", "abort")

# Engine counter attribute -> vLLM family name (prometheus_client appends `_total`).
_COUNTERS = {
    "num_preemptions_total": (
        "vllm:num_preemptions",
        "Cumulative number of preemption from the engine.",
    ),
    "prompt_tokens_total": ("vllm:prompt_tokens", "Number of prefill tokens processed."),
    "generation_tokens_total": ("vllm:generation_tokens", "Number of generation tokens processed."),
    "prefix_cache_queries_total": (
        "vllm:prefix_cache_queries",
        "Prefix cache queries, in terms of number of queried tokens.",
    ),
    "prefix_cache_hits_total": (
        "vllm:prefix_cache_hits",
        "Prefix cache hits, in terms of number of cached tokens.",
    ),
}
_SPEC_COUNTERS = {
    "spec_decode_num_drafts_total": (
        "vllm:spec_decode_num_drafts",
        "Number of spec decoding drafts.",
    ),
    "spec_decode_num_draft_tokens_total": (
        "vllm:spec_decode_num_draft_tokens",
        "Number of draft tokens.",
    ),
    "spec_decode_num_accepted_tokens_total": (
        "vllm:spec_decode_num_accepted_tokens",
        "Number of accepted tokens.",
    ),
}


class IncrementalHistogram:
    """Cumulative bucket counts over a growing sample list, folding in only the new tail."""

    def __init__(self, buckets: Sequence[float]) -> None:
        self.buckets = tuple(buckets)
        self._counts = [0] * (len(self.buckets) + 1)
        self._seen = 0
        self.sum = 0.0

    def update(self, samples: Sequence[float]) -> None:
        for v in samples[self._seen :]:
            self._counts[bisect.bisect_left(self.buckets, v)] += 1
            self.sum += v
        self._seen = len(samples)

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for edge, n in zip((*self.buckets, float("inf")), self._counts, strict=True):
            running += n
            out.append((_le(edge), running))
        return out


def _le(edge: float) -> str:
    return "+Inf" if edge == float("inf") else repr(float(edge))


def cache_config_labels(cfg: EngineConfig) -> dict[str, str]:
    """`vllm:cache_config_info`'s labels (a subset of vLLM's CacheConfig.metrics_info())."""
    return {
        "block_size": str(cfg.block_size),
        "cache_dtype": "auto",
        "enable_prefix_caching": str(cfg.enable_prefix_caching),
        "num_gpu_blocks": str(cfg.num_gpu_blocks),
        "num_cpu_blocks": "None",
        "kv_cache_size_tokens": str(cfg.num_gpu_blocks * cfg.block_size),
    }


class HttpStats:
    """Counts the engine cannot see: outcomes by finish reason and admission rejections."""

    def __init__(self) -> None:
        self.finished: Counter[str] = Counter()
        self.admission_rejections = 0


class SimCollector(Collector):
    """Exposes one engine's state as vLLM v1 metric families (labels model_name, engine="0")."""

    def __init__(
        self,
        engine: Engine,
        *,
        model_name: str,
        cache_info: dict[str, str],
        http_stats: HttpStats,
    ) -> None:
        self.engine = engine
        self.model_name = model_name
        self.cache_info = cache_info
        self.http_stats = http_stats
        self._iteration_tokens = IncrementalHistogram(ITERATION_TOKENS_BUCKETS)
        self._ttft = IncrementalHistogram(TTFT_BUCKETS)

    @property
    def _labels(self) -> list[str]:
        return [self.model_name, "0"]

    def collect(self) -> Iterator[Metric]:
        e = self.engine
        yield self._gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            e.num_requests_running,
        )
        yield self._gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            e.num_requests_waiting,
        )
        yield self._gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            e.kv_cache_usage_perc,
        )
        for attr, (name, doc) in _COUNTERS.items():
            yield self._counter(name, doc, getattr(e, attr))
        if e.config.num_speculative_tokens > 0:
            # vLLM registers the spec-decode families only when speculation is configured.
            for attr, (name, doc) in _SPEC_COUNTERS.items():
                yield self._counter(name, doc, getattr(e, attr))
        yield self._request_success()
        yield self._counter(
            "vllm:admission_rejections",
            "Requests rejected at admission because the waiting queue was full.",
            self.http_stats.admission_rejections,
        )
        yield self._histogram(
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            self._iteration_tokens,
            e.emitting_step_tokens,
        )
        yield self._histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            self._ttft,
            e.ttft_samples,
        )
        yield self._cache_config_info()

    def _gauge(self, name: str, doc: str, value: float) -> GaugeMetricFamily:
        g = GaugeMetricFamily(name, doc, labels=["model_name", "engine"])
        g.add_metric(self._labels, float(value))
        return g

    def _counter(self, name: str, doc: str, value: float) -> CounterMetricFamily:
        c = CounterMetricFamily(name, doc, labels=["model_name", "engine"])
        c.add_metric(self._labels, float(value))
        return c

    def _request_success(self) -> CounterMetricFamily:
        c = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=["model_name", "engine", "finished_reason"],
        )
        for reason in FINISH_REASONS:
            c.add_metric([*self._labels, reason], float(self.http_stats.finished[reason]))
        return c

    def _histogram(
        self, name: str, doc: str, hist: IncrementalHistogram, samples: Sequence[float]
    ) -> HistogramMetricFamily:
        hist.update(samples)
        h = HistogramMetricFamily(name, doc, labels=["model_name", "engine"])
        h.add_metric(self._labels, hist.cumulative(), sum_value=hist.sum)
        return h

    def _cache_config_info(self) -> GaugeMetricFamily:
        # As vLLM: an info-style gauge fixed at 1, labelled with the cache config and engine only.
        labels = {**self.cache_info, "engine": "0"}
        g = GaugeMetricFamily(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            labels=list(labels),
        )
        g.add_metric(list(labels.values()), 1.0)
        return g
