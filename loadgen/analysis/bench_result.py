"""A run's measured streams as `vllm bench serve`'s result JSON: its field names, in its order,
so a script that reads bench's result file reads loadgen's.

The figures are loadgen's, each defined once (analysis/rates.py, benchmark.py): duration from
the first intended send to the last end; TTFT from the actual send; TPOT the decode window
over the tokens after the first chunk; ITL the gaps between tokens (a chunk's gap spread over
its tokens) pooled over streams; E2EL send to end; client queue time the wait between a
request's intended and actual send (a seat under a concurrency cap). Means, medians, standard
deviations (population) and percentiles (linear, numpy's default) over the ok streams, in ms;
a metric no stream had is 0, as bench writes it. Goodput is bench's: requests/s of ok streams
within every limit, a stream without a TPOT counting as 0 ms. The peaks are bench's: output
tokens and requests in flight per whole second from the first send.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from loadgen.analysis import rates
from loadgen.analysis.benchmark import bench_fields
from loadgen.records import StreamRecord

NS = rates.NS
MS = 1e3
# bench's --percentile-metrics names, what each measures per ok stream (seconds), and the
# section it prints under; the queue-inclusive E2EL only where bench has it (a cap and a rate).
METRIC_HEADERS = {
    "ttft": ("TTFT", "Time to First Token"),
    "tpot": ("TPOT", "Time per Output Token (excl. 1st token)"),
    "itl": ("ITL", "Inter-token Latency"),
    "e2el": ("E2EL", "End-to-end Latency"),
    "client_queue_time": ("Client Queue Time", "Client-side Queueing"),
    "e2el_including_client_queue": (
        "E2EL incl. Client Queue", "Queue-inclusive End-to-end Latency"),
}  # fmt: skip
DEFAULT_METRICS = ("ttft", "tpot", "itl")


@dataclass(frozen=True, slots=True)
class BenchSetup:
    """What the command was asked, echoed into the result as bench echoes it."""

    backend: str
    model_id: str
    tokenizer_id: str
    num_prompts: int
    request_rate: float
    burstiness: float
    max_concurrency: int | None
    date: str
    label: str | None = None
    ramp: tuple[str, float, float] | None = None
    metadata: tuple[tuple[str, str], ...] = ()
    percentile_metrics: tuple[str, ...] = DEFAULT_METRICS
    percentiles: tuple[float, ...] = (99.0,)
    goodput_ms: dict[str, float] = field(default_factory=dict)


def queue_s(rec: StreamRecord) -> float | None:
    """The wait between a request's intended and actual send (bench's client_queue_time)."""
    if rec.t_sent_ns is None:
        return None
    return (rec.t_sent_ns - rec.t_intended_ns) / NS


def _queued_e2e_s(rec: StreamRecord) -> float | None:
    e2e, queue = rates.e2e_s(rec), queue_s(rec)
    return None if e2e is None or queue is None else e2e + queue


# Per ok stream, the values of each metric in seconds.
_VALUES: dict[str, Callable[[StreamRecord], Iterable[float | None]]] = {
    "ttft": lambda r: [rates.ttft_s(r)],
    "tpot": lambda r: [rates.tpot_s(r)],
    "itl": lambda r: [g / NS for g in rates.token_gaps_ns(r)],
    "e2el": lambda r: [rates.e2e_s(r)],
    "client_queue_time": lambda r: [queue_s(r)],
    "e2el_including_client_queue": lambda r: [_queued_e2e_s(r)],
}


def percentile_key(p: float) -> str:
    """bench's name for a percentile: 99 -> "p99", 99.9 -> "p99.9"."""
    return f"p{int(p) if int(p) == p else p}"


def bench_result(records: list[StreamRecord], setup: BenchSetup) -> dict[str, Any]:
    """The result JSON of the measured `records` (module docstring), bench's fields in order."""
    out: dict[str, Any] = {
        "date": setup.date, "endpoint_type": setup.backend, "backend": setup.backend,
        "label": setup.label, "model_id": setup.model_id, "tokenizer_id": setup.tokenizer_id,
        "num_prompts": setup.num_prompts,
    }  # fmt: skip
    out |= dict(setup.metadata)
    rate = setup.request_rate
    out |= {"request_rate": "inf" if math.isinf(rate) else rate,
            "burstiness": setup.burstiness, "max_concurrency": setup.max_concurrency}  # fmt: skip
    if setup.ramp is not None:
        out |= dict(zip(("ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps"),
                        setup.ramp, strict=True))  # fmt: skip
    ok = [r for r in records if r.status == "ok"]
    b = bench_fields(records)
    out |= {
        "duration": b.duration_s or 0.0, "completed": b.requests_ok,
        "failed": b.requests_failed, "total_input_tokens": b.prompt_tokens,
        "total_output_tokens": b.output_tokens, "request_throughput": b.request_per_s or 0.0,
        "request_goodput": _goodput(ok, setup.goodput_ms, b.duration_s),
        "output_throughput": b.output_tok_s or 0.0, "total_token_throughput": b.total_tok_s or 0.0,
        # bench times only a success: a failed request's latency stays 0.
        "latencies": [(rates.e2e_s(r) if r.status == "ok" else None) or 0.0 for r in records],
        "queue_times": [queue_s(r) or 0.0 for r in records],
    }  # fmt: skip
    out |= _peaks(ok)
    out["rtfx"] = 0.0
    for name in setup.percentile_metrics:
        out |= _metric_stats(name, ok, setup.percentiles)
    return out


def _metric_stats(name: str, ok: list[StreamRecord], percentiles: tuple[float, ...]) -> dict:
    xs = np.array([v for r in ok for v in _VALUES[name](r) if v is not None], dtype=float) * MS
    if xs.size == 0:
        xs = np.zeros(1)
    out = {f"mean_{name}_ms": float(xs.mean()), f"median_{name}_ms": float(np.median(xs)),
           f"std_{name}_ms": float(xs.std())}  # fmt: skip
    for p in percentiles:
        out[f"{percentile_key(p)}_{name}_ms"] = float(np.percentile(xs, p))
    return out


def _goodput(
    ok: list[StreamRecord], limits_ms: dict[str, float], duration_s: float | None
) -> float | None:
    """Requests/s of ok streams within every limit (None: no --goodput given)."""
    if not limits_ms:
        return None
    measures = {"ttft": rates.ttft_s, "tpot": rates.tpot_s, "e2el": rates.e2e_s}

    def good(r: StreamRecord) -> bool:
        for key, limit in limits_ms.items():
            value = measures[key](r)
            # bench counts a stream with no TPOT (one token) as 0 ms; no TTFT is no success.
            value = 0.0 if value is None and key == "tpot" else value
            if value is None or value * MS > limit:
                return False
        return True

    return sum(map(good, ok)) / duration_s if duration_s else 0.0


def _peaks(ok: list[StreamRecord]) -> dict[str, Any]:
    """Peak output tokens and requests in flight per whole second from the first send."""
    starts = [r.t_sent_ns for r in ok if r.t_sent_ns is not None and r.t_done_ns is not None]
    if not starts:
        return {"max_output_tokens_per_s": 0.0, "max_concurrent_requests": 0}
    t0 = min(starts)
    seconds = (max(r.t_done_ns or t0 for r in ok) - t0) // NS + 2
    tokens = np.zeros(seconds)
    flight = np.zeros(seconds, dtype=int)
    for r in ok:
        if r.t_sent_ns is None or r.t_done_ns is None:
            continue
        for t, k in zip(r.chunk_ns, rates.chunk_token_counts(r), strict=True):
            tokens[(t - t0) // NS] += k
        flight[(r.t_sent_ns - t0) // NS : (r.t_done_ns - t0) // NS + 1] += 1
    return {"max_output_tokens_per_s": float(tokens.max()),
            "max_concurrent_requests": int(flight.max())}  # fmt: skip
