"""Server metrics in one vocabulary: the exposition's sample names mapped onto vLLM v1's (without
the `vllm:` prefix, see records.CANONICAL_METRICS) and parsed, below the engine that polls
them and the server launcher that reads them back, so analysis reads one set of names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

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
    # docs/references/production_metrics.md: observed at the first token, like vLLM's.
    "sglang:time_to_first_token_seconds_sum": "time_to_first_token_seconds_sum",
    "sglang:time_to_first_token_seconds_count": "time_to_first_token_seconds_count",
    # llama.cpp
    "llamacpp:requests_processing": "num_requests_running",
    "llamacpp:requests_deferred": "num_requests_waiting",
    "llamacpp:kv_cache_usage_ratio": "kv_cache_usage_perc",
    "llamacpp:prompt_tokens_total": "prompt_tokens_total",
    "llamacpp:tokens_predicted_total": "generation_tokens_total",
}

INFO_METRICS = ("vllm:cache_config_info",)

# The sample lines parse_exposition reads: those of a name above, nothing else. The poller
# parses on the event loop that times the streams, and prometheus_client's parser takes ~15 us
# a line: a vLLM-sized exposition (19 histograms, 603 lines, 55 kB) took 9 ms a scrape on the
# 2-core build machine, a stall inside every TTFT it fell in. Comments go too: a sample
# without its TYPE line parses as untyped under the same sample name and value.
_WANTED_LINES = re.compile(
    "^(?:" + "|".join(re.escape(n) for n in (*ALIASES, *INFO_METRICS)) + r")[{ \t].*$",
    re.MULTILINE,
)


@dataclass(frozen=True, slots=True)
class ParsedMetrics:
    values: dict[str, float]
    # Labels of info metrics (e.g. cache_config_info's block_size), keyed by metric name.
    info: dict[str, dict[str, str]]


def parse_exposition(text: str) -> ParsedMetrics:
    """Canonical values and info labels from Prometheus text exposition."""
    return parse_families(text_string_to_metric_families(wanted_lines(text)))


def wanted_lines(text: str) -> str:
    """The sample lines of `text` whose names parse_exposition maps (see _WANTED_LINES)."""
    return "\n".join(_WANTED_LINES.findall(text)) + "\n"


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
