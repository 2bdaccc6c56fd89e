"""The sim's periodic engine line, as vLLM's LoggingStatLogger prints it (loadgen/enginelog.py),
from the same engine counters its /metrics exposes: a launched sim's log carries the witness
that loadgen reads from a real vLLM's.

As vLLM: every VLLM_LOG_STATS_INTERVAL seconds of wall time (10 by default), tokens counted
since the last line over the wall time since it, the queues as they stand, and nothing while
this interval and the last were idle. The prefix cache hit rate is over the whole boot (vLLM's
is over its last 1000 requests).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable

from loadgen.enginelog import VLLM_LOG_INTERVAL_S, engine_line
from loadgen.sim.engine import Engine

INTERVAL_ENV = "VLLM_LOG_STATS_INTERVAL"


def log_interval_s() -> float:
    """VLLM_LOG_STATS_INTERVAL when it is a positive number, else vLLM's default."""
    try:
        value = float(os.environ.get(INTERVAL_ENV, ""))
    except ValueError:
        return VLLM_LOG_INTERVAL_S
    return value if value > 0 else VLLM_LOG_INTERVAL_S


class EngineStatLog:
    """Counts since the previous line; `line(now)` gives the next one (None: idle)."""

    def __init__(self, engine: Engine, now_s: float) -> None:
        self.engine = engine
        self._last_s = now_s
        self._gen = engine.generation_tokens_total
        self._prompt = engine.prompt_tokens_total
        self._preempt = engine.num_preemptions_total
        self._was_busy = False

    def line(self, now_s: float, stamp: str) -> str | None:
        e = self.engine
        elapsed = now_s - self._last_s
        gen = (e.generation_tokens_total - self._gen) / elapsed if elapsed > 0 else 0.0
        prompt = (e.prompt_tokens_total - self._prompt) / elapsed if elapsed > 0 else 0.0
        preempted = e.num_preemptions_total - self._preempt
        self._last_s, self._gen = now_s, e.generation_tokens_total
        self._prompt, self._preempt = e.prompt_tokens_total, e.num_preemptions_total
        busy = bool(gen or prompt)
        idle = not busy and not self._was_busy
        self._was_busy = busy
        if idle:
            return None
        queries = e.prefix_cache_queries_total
        return engine_line(
            stamp, prompt_tok_s=prompt, gen_tok_s=gen, running=e.num_requests_running,
            waiting=e.num_requests_waiting, kv_usage=e.kv_cache_usage_perc,
            prefix_hit_rate=e.prefix_cache_hits_total / queries if queries else None,
            preemptions=preempted,
        )  # fmt: skip


async def log_engine_stats(engine: Engine, emit: Callable[[str], None], interval_s: float) -> None:
    """Emits a line every `interval_s` of wall time until cancelled, stamped as vLLM stamps its
    log (local time to the second)."""
    log = EngineStatLog(engine, time.monotonic())
    while True:
        await asyncio.sleep(interval_s)
        line = log.line(time.monotonic(), time.strftime("%m-%d %H:%M:%S"))
        if line is not None:
            emit(line)
