"""A run's measured streams as `vllm bench serve`'s result JSON: its field names, in its order,
so a script that reads bench's result file reads loadgen's.

The figures are loadgen's, each defined once (analysis/rates.py, benchmark.py): duration from
the first intended send to the last end; TTFT from the actual send; TPOT the decode window
over the tokens after the first chunk; ITL the gaps between tokens (a chunk's gap spread over
its tokens) pooled over streams; E2EL send to end; client queue time, as bench's, from a
request's arrival to its send: its wait for a seat under --max-concurrency included (at an
infinite rate every request arrives at the start). Means, medians, standard deviations
(population) and percentiles (linear, numpy's default) over the ok streams, in ms; a metric no
stream had is 0, as bench writes it. Goodput is bench's: requests/s of ok streams within every
limit, a stream without a TPOT counting as 0 ms. Peak output tokens are bench's, per whole
second from the first send; peak requests in flight are the true peak of the ok streams'
overlap (send to end), as vLLM counts it after 0.32 (0.32 counted every request active in a
whole second, a peak of 32 under a cap of 8). `latencies` and `queue_times` are in request
order (arrival, then intended send), as bench lists its requests.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

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


def arrivals_ns(records: list[StreamRecord], setup: BenchSetup) -> list[int]:
    """When each request arrived, bench's client_queue_time's start: with --max-concurrency
    at an infinite rate (a closed loop, which stamps a send intended as its seat frees), every
    request at the first intended send, as bench queues them all on its semaphore at once;
    else its intended send less its wait for a seat."""
    if not records:
        return []
    if math.isinf(setup.request_rate) and setup.ramp is None and setup.max_concurrency:
        start = min(r.t_intended_ns for r in records)
        return [start] * len(records)
    return [r.t_intended_ns - (r.seat_wait_ns or 0) for r in records]


def _queue_s(rec: StreamRecord, arrival_ns: int) -> float | None:
    return None if rec.t_sent_ns is None else (rec.t_sent_ns - arrival_ns) / NS


def _queued_e2e_s(rec: StreamRecord, arrival_ns: int) -> float | None:
    e2e, queue = rates.e2e_s(rec), _queue_s(rec, arrival_ns)
    return None if e2e is None or queue is None else e2e + queue


# Per ok stream and its arrival, the values of each metric in seconds.
_VALUES: dict[str, Callable[[StreamRecord, int], Iterable[float | None]]] = {
    "ttft": lambda r, _: [rates.ttft_s(r)],
    "tpot": lambda r, _: [rates.tpot_s(r)],
    "itl": lambda r, _: [g / NS for g in rates.token_gaps_ns(r)],
    "e2el": lambda r, _: [rates.e2e_s(r)],
    "client_queue_time": lambda r, a: [_queue_s(r, a)],
    "e2el_including_client_queue": lambda r, a: [_queued_e2e_s(r, a)],
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
    arrived = sorted(zip(arrivals_ns(records, setup), records, strict=True),
                     key=lambda ar: (ar[0], ar[1].t_intended_ns))  # fmt: skip
    ok = [(a, r) for a, r in arrived if r.status == "ok"]
    b = bench_fields(records)
    out |= {
        "duration": b.duration_s or 0.0, "completed": b.requests_ok,
        "failed": b.requests_failed, "total_input_tokens": b.prompt_tokens,
        "total_output_tokens": b.output_tokens, "request_throughput": b.request_per_s or 0.0,
        "request_goodput": _goodput([r for _, r in ok], setup.goodput_ms, b.duration_s),
        "output_throughput": b.output_tok_s or 0.0, "total_token_throughput": b.total_tok_s or 0.0,
        # bench times only a success (as e2e_s does): a failed request's latency stays 0.
        "latencies": [rates.e2e_s(r) or 0.0 for _, r in arrived],
        "queue_times": [_queue_s(r, a) or 0.0 for a, r in arrived],
    }  # fmt: skip
    out |= _peaks([r for _, r in ok])
    out["rtfx"] = 0.0
    for name in setup.percentile_metrics:
        out |= _metric_stats(name, ok, setup.percentiles)
    return out


def _metric_stats(
    name: str, ok: list[tuple[int, StreamRecord]], percentiles: tuple[float, ...]
) -> dict:
    values = _VALUES[name]
    xs = np.array([v for a, r in ok for v in values(r, a) if v is not None], dtype=float) * MS
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
    """Peak output tokens per whole second from the first send, and the peak of requests in
    flight: a sweep over the streams' [send, end), an end before a send at one instant."""
    timed = [r for r in ok if r.t_sent_ns is not None and r.t_done_ns is not None]
    if not timed:
        return {"max_output_tokens_per_s": 0.0, "max_concurrent_requests": 0}
    t0 = min(cast(int, r.t_sent_ns) for r in timed)
    seconds = (max(cast(int, r.t_done_ns) for r in timed) - t0) // NS + 2
    tokens = np.zeros(seconds)
    for r in timed:
        for t, k in zip(r.chunk_ns, rates.chunk_token_counts(r), strict=True):
            tokens[(t - t0) // NS] += k
    edges = sorted([(r.t_sent_ns, 1) for r in timed] + [(r.t_done_ns, -1) for r in timed])
    in_flight = np.cumsum([step for _, step in edges])
    return {"max_output_tokens_per_s": float(tokens.max()),
            "max_concurrent_requests": int(in_flight.max())}  # fmt: skip
