"""A server's own account read from its log, a witness beside /metrics and loadgen's streams:
vLLM's periodic engine lines (and the sim's, which prints them in vLLM's words), and llama.cpp's
per-request timing lines.

vllm/v1/metrics/loggers.py (0.26 and 0.32) LoggingStatLogger.log, every
VLLM_LOG_STATS_INTERVAL (10 s by default), at INFO unless the engine was idle for two intervals:
"Engine 000: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s,
Running: %d reqs, Waiting: %d reqs[, Deferred: %d reqs][, Preemptions: %d], %s KV cache usage:
%.1f%%[, Prefix cache hit rate: %.1f%%]". Both throughputs are tokens counted since the previous
call divided by the monotonic time since it; Running and Waiting are the last step's. The line is
stamped by vLLM's formatter with the local wall time to the second ("INFO 12-04 07:37:43"),
without a year or a zone.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

# The interval vLLM logs at unless VLLM_LOG_STATS_INTERVAL says otherwise.
VLLM_LOG_INTERVAL_S = 10.0

_ENGINE_LINE = re.compile(
    r"(?P<level>[A-Z]+) (?P<month>\d\d)-(?P<day>\d\d) (?P<time>\d\d:\d\d:\d\d)(?:\.\d+)? "
    r"\[[^\]]*\] Engine (?P<engine>\d+): "
    r"Avg prompt throughput: (?P<prompt>[\d.]+) tokens/s, "
    r"Avg generation throughput: (?P<gen>[\d.]+) tokens/s, "
    r"Running: (?P<running>\d+) reqs, Waiting: (?P<waiting>\d+) reqs"
    r"(?:, Deferred: \d+ reqs)?(?:, KV fetch: [^,]*(?:, [^,]*){2})?"
    r"(?:, Preemptions: (?P<preempt>\d+))?"
    r", (?:\w+(?: \+ host)? )?KV cache usage: (?P<kv>[\d.]+)%"
    r"(?:, Prefix cache hit rate: (?P<hit>[\d.]+)%)?"
)


@dataclass(frozen=True, slots=True)
class EngineLine:
    """One periodic engine line. `stamp` is its local wall time to the second, year unknown
    ("%m-%d %H:%M:%S"); rates are tokens per second over the interval that ends there."""

    stamp: str
    engine: int
    prompt_tok_s: float
    gen_tok_s: float
    running: int
    waiting: int
    kv_perc: float
    prefix_hit_perc: float | None
    preemptions: int

    def epoch_s(self, near_epoch_s: float, utc_offset_s: int) -> float:
        """The line's time in Unix seconds (its second's start), taking the year that puts it
        nearest `near_epoch_s` (a log read around New Year), the stamp being local time
        `utc_offset_s` east of UTC."""
        zone = dt.timezone(dt.timedelta(seconds=utc_offset_s))
        near = dt.datetime.fromtimestamp(near_epoch_s, zone)
        month_day, clock = self.stamp.split(" ")
        month, day = (int(x) for x in month_day.split("-"))
        h, m, s = (int(x) for x in clock.split(":"))
        candidates = []
        for year in (near.year - 1, near.year, near.year + 1):
            try:
                candidates.append(dt.datetime(year, month, day, h, m, s, tzinfo=zone).timestamp())
            except ValueError:  # 02-29 outside a leap year
                continue
        return min(candidates, key=lambda t: abs(t - near_epoch_s))


def parse_engine_lines(text: str) -> list[EngineLine]:
    """Every vLLM engine line in `text`, in order."""
    return [
        EngineLine(
            stamp=f"{m['month']}-{m['day']} {m['time']}",
            engine=int(m["engine"]),
            prompt_tok_s=float(m["prompt"]),
            gen_tok_s=float(m["gen"]),
            running=int(m["running"]),
            waiting=int(m["waiting"]),
            kv_perc=float(m["kv"]),
            prefix_hit_perc=None if m["hit"] is None else float(m["hit"]),
            preemptions=int(m["preempt"] or 0),
        )
        for m in _ENGINE_LINE.finditer(text)
    ]


def engine_line(
    stamp: str,
    *,
    prompt_tok_s: float,
    gen_tok_s: float,
    running: int,
    waiting: int,
    kv_usage: float,
    prefix_hit_rate: float | None,
    preemptions: int = 0,
) -> str:
    """The line in vLLM's words (the sim prints it): `kv_usage` and `prefix_hit_rate` as
    fractions, as vLLM's SchedulerStats hold them."""
    parts = [
        f"Avg prompt throughput: {prompt_tok_s:.1f} tokens/s",
        f"Avg generation throughput: {gen_tok_s:.1f} tokens/s",
        f"Running: {running} reqs",
        f"Waiting: {waiting} reqs",
    ]
    if preemptions:
        parts.append(f"Preemptions: {preemptions}")
    parts.append(f"GPU KV cache usage: {kv_usage * 100:.1f}%")
    if prefix_hit_rate is not None:
        parts.append(f"Prefix cache hit rate: {prefix_hit_rate * 100:.1f}%")
    return f"INFO {stamp} [loggers.py] Engine 000: " + ", ".join(parts)


# llama.cpp tools/server/server-context.cpp print_timings (0.3.36), one SLT_INF line each, after
# the "slot %12.*s: id %2d | task %d | " prefix: "prompt eval time = %10.2f ms / %5d tokens
# (...)", "       eval time = %10.2f ms / %5d tokens (...)". Eval time runs from the first
# sampled token to the last; its tokens are all the request generated, the first included.
_LLAMA_TIMING = re.compile(
    r"\| task (?P<task>\d+) \| +(?P<what>prompt eval|eval) time = +(?P<ms>[\d.]+) ms "
    r"/ +(?P<tokens>\d+) tokens"
)


@dataclass(frozen=True, slots=True)
class RequestTiming:
    """One llama.cpp request's own timing, by task id (the order the server took requests)."""

    task: int
    prompt_ms: float
    prompt_tokens: int  # evaluated, the reused cache not counted
    eval_ms: float
    eval_tokens: int


def parse_request_timings(text: str) -> list[RequestTiming]:
    """Every request whose prompt eval and eval lines both appear in `text`, by task id."""
    found: dict[int, dict[str, tuple[float, int]]] = {}
    for m in _LLAMA_TIMING.finditer(text):
        found.setdefault(int(m["task"]), {})[m["what"]] = (float(m["ms"]), int(m["tokens"]))
    return [
        RequestTiming(task, *parts["prompt eval"], *parts["eval"])
        for task, parts in sorted(found.items())
        if {"prompt eval", "eval"} <= set(parts)
    ]
