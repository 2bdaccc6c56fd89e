"""`vllm bench serve`'s summary block, line for line as vLLM 0.32 prints it (40-column labels,
a 50-wide banner, two decimals), from a result of analysis/bench_result.py: a reader's eye and
a script that greps bench's lines find them where they were."""

from __future__ import annotations

import math
from typing import Any

from loadgen.analysis.bench_result import METRIC_HEADERS, percentile_key

WIDTH = 50


def _line(label: str, value: Any, fmt: str = "") -> str:
    # bench pads the value to 10 as well: its lines end in spaces.
    return f"{label:<40} {value:<10{fmt}}"


def bench_block(result: dict[str, Any], metrics: tuple[str, ...],
                percentiles: tuple[float, ...]) -> str:  # fmt: skip
    """The block bench prints for `result` (its field names), `metrics` in the order bench
    prints them."""
    title = " Serving Benchmark Result "
    lines = [f"{title:=^{WIDTH}}",
             _line("Successful requests:", result["completed"]),
             _line("Failed requests:", result["failed"])]  # fmt: skip
    if result["max_concurrency"] is not None:
        lines.append(_line("Maximum request concurrency:", result["max_concurrency"]))
    rate = result["request_rate"]
    if rate != "inf" and not (isinstance(rate, float) and math.isinf(rate)):
        lines.append(_line("Request rate configured (RPS):", rate, ".2f"))
    lines += [
        _line("Benchmark duration (s):", result["duration"], ".2f"),
        _line("Total input tokens:", result["total_input_tokens"]),
        _line("Total generated tokens:", result["total_output_tokens"]),
        _line("Request throughput (req/s):", result["request_throughput"], ".2f"),
    ]
    if result["request_goodput"] is not None:
        lines.append(_line("Request goodput (req/s):", result["request_goodput"], ".2f"))
    lines += [
        _line("Output token throughput (tok/s):", result["output_throughput"], ".2f"),
        _line("Peak output token throughput (tok/s):", result["max_output_tokens_per_s"], ".2f"),
        _line("Peak concurrent requests:", result["max_concurrent_requests"], ".2f"),
        _line("Total token throughput (tok/s):", result["total_token_throughput"], ".2f"),
    ]
    for name in (m for m in METRIC_HEADERS if m in metrics):
        label, header = METRIC_HEADERS[name]
        lines.append(f"{header:-^{WIDTH}}")
        lines.append(_line(f"Mean {label} (ms):", result[f"mean_{name}_ms"], ".2f"))
        lines.append(_line(f"Median {label} (ms):", result[f"median_{name}_ms"], ".2f"))
        for p in percentiles:
            word = percentile_key(p)
            lines.append(_line(f"P{word[1:]} {label} (ms):", result[f"{word}_{name}_ms"], ".2f"))
    lines.append("=" * WIDTH)
    return "\n".join(lines)
