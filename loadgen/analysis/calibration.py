"""Measuring one server for the sim's step-cost model: the plan of points, what each
measures, and the design row the sim's model gives it (calibration_fit.py fits the costs).

The sim's engine prices a step as (sim/profiles.py)

    fixed_s + per_token_s x prefill tokens + decode_token_s x decode tokens
            + decode_ctx_s x sum of decoding contexts + prefill_ctx_s x prefill attention work
            + cached_token_s x prefix-cache tokens restored

and every request waits request_overhead_s before it is scheduled. Every point below measures
a time that is a sum of such steps with a known schedule, so it is linear in the seven costs:
its design row holds each cost's coefficient.

- `ttft`: one stream alone, cold (salted), max_tokens 1. TTFT = overhead + its prefill steps:
  ceil(U / budget) steps, U tokens, work sum c (before + c / 2) over its chunks c.
- `cached`: one stream whose prefix was primed: the steps of its uncached tail after the hit,
  plus the hit's restore cost. Its cached tokens come from the server's usage when reported.
- `decode`: B streams sent together; the inter-chunk gaps while all B decode (after the last
  first token, before the first last one) are single decode steps of batch B. Their mean is
  the measurement: fixed + decode_token B(1 + k) + decode_ctx B x context.

Timing is the client's (send to first content chunk, chunk arrivals), so the fitted overhead
holds the HTTP path too; token counts are the server's usage. Speculative decoding (k draft
tokens, acceptance a) is read from the tokens per chunk: k + 1 is the largest chunk, and the
mean chunk is 1 + a + ... + a^k.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Literal

from loadgen.analysis import rates
from loadgen.analysis.stats import median
from loadgen.codec import from_json, json_field, json_meta
from loadgen.records import MetricsSample, StreamRecord
from loadgen.run_manifest import RunManifest

COSTS = ("request_overhead_s", "fixed_s", "per_token_s", "decode_token_s", "decode_ctx_s",
         "prefill_ctx_s", "cached_token_s")  # fmt: skip
PointKind = Literal["ttft", "cached", "decode"]
# Below this many decode gaps in the all-decoding window a decode point falls back to every
# gap after the last first token.
MIN_WINDOW_GAPS = 4
# A server that now and then sends two tokens in one chunk (a late detokenizer, coalesced
# writes: vLLM's CPU build does) is not speculating: drafts show as a mean above this, and k + 1
# as the largest chunk seen in at least SPEC_SHARE of them.
SPEC_MEAN = 1.05
SPEC_SHARE = 0.01


@dataclass(frozen=True, slots=True)
class ServerShape:
    """What the plan and the model need to know of the server's scheduler."""

    budget: int  # max_num_batched_tokens
    seats: int  # max_num_seqs
    block_size: int
    max_model_len: int
    prefix_caching: bool = True
    spec_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Point:
    """One measured shape: `streams` streams of `prompt_tokens` (the last `prompt_tokens -
    prefix_tokens` of them uncached) and `max_tokens` each, `reps` times."""

    name: str
    kind: PointKind
    prompt_tokens: int
    max_tokens: int
    streams: int = 1
    prefix_tokens: int = 0
    reps: int = 3

    @property
    def requests(self) -> int:
        primes = self.reps if self.kind == "cached" else 0
        return self.streams * self.reps + primes


@dataclass(frozen=True, slots=True)
class PlanLimits:
    reps: int = 3
    max_prompt_tokens: int = 65536
    decode_tokens: int = 64
    # The TTFT floor's prompt: small, yet above the salt's four words on any tokenizer.
    tiny_tokens: int = 32


def is_calibration(manifest: RunManifest) -> bool:
    """run.json of a `loadgen calibrate` directory."""
    return manifest.calibrate is not None


def calibration_plan(shape: ServerShape, limits: PlanLimits = PlanLimits()) -> tuple[Point, ...]:
    """The points, cheapest first: the TTFT floor, prefills from half a budget up to the
    largest prompt the window allows (doubling), cached prefixes, decode by batch up to the
    seats, decode by context."""
    reps, out = limits.reps, limits.decode_tokens
    longest = min(limits.max_prompt_tokens, shape.max_model_len - out - 1)
    points = [Point("tiny", "ttft", limits.tiny_tokens, 1, reps=reps)]
    points += [Point(f"prefill-{n}", "ttft", n, 1, reps=reps) for n in _doubling(
        max(shape.budget // 2, limits.tiny_tokens * 2), longest)]  # fmt: skip
    if shape.prefix_caching:
        tail = max(shape.block_size, 32)
        for prefix in _doubling(max(shape.budget, 4 * shape.block_size), longest - tail, 4):
            points.append(Point(f"cached-{prefix}", "cached", prefix + tail, 1, 1, prefix, reps))
    short = max(limits.tiny_tokens, min(256, shape.budget // max(shape.seats, 1)))
    for batch in _doubling(1, shape.seats):
        points.append(Point(f"decode-b{batch}", "decode", short, out, batch, reps=reps))
    for context in _doubling(max(shape.budget, 1024), longest - out, 4)[-2:]:
        points.append(Point(f"decode-ctx{context}", "decode", context, out, 1, reps=reps))
    return tuple(points)


def _doubling(lo: int, hi: int, factor: int = 2) -> list[int]:
    """lo, lo x factor, ... up to hi, and hi itself when the last step falls short of it."""
    out: list[int] = []
    n = lo
    while n <= hi:
        out.append(n)
        n *= factor
    if out and out[-1] < hi and hi / out[-1] > 1.5:
        out.append(hi)
    return out


@dataclass(frozen=True, slots=True)
class Measurement:
    """One point's measured time, its sample count and the model's coefficients for it."""

    point: str
    kind: PointKind
    value_s: float
    samples: int
    row: Mapping[str, float]
    # What the row was built from (prompt, cached and context tokens), for the record.
    basis: Mapping[str, float] = field(default_factory=dict)
    # The row's engine steps one by one (their sum is the row less the request overhead), for
    # a floor under each step; empty: the row is one step.
    steps: tuple[Mapping[str, float], ...] = ()


def prefill_steps(shape: ServerShape, uncached: int, cached: int) -> list[dict[str, float]]:
    """The coefficients of each step of one stream's prefill of `uncached` tokens after a hit
    of `cached`, alone on the server (the first step restores the hit)."""
    steps = []
    before, left = cached, uncached
    while left > 0:
        chunk = min(left, shape.budget)
        step = dict.fromkeys(COSTS, 0.0)
        step["fixed_s"] = 1.0
        step["per_token_s"] = float(chunk)
        step["prefill_ctx_s"] = chunk * (before + chunk / 2)
        steps.append(step)
        before += chunk
        left -= chunk
    if steps:
        steps[0]["cached_token_s"] = float(cached)
    return steps


def prefill_row(shape: ServerShape, uncached: int, cached: int) -> dict[str, float]:
    """The coefficients of one stream's TTFT: the request overhead and every prefill step."""
    row = dict.fromkeys(COSTS, 0.0)
    row["request_overhead_s"] = 1.0
    for step in prefill_steps(shape, uncached, cached):
        for name, value in step.items():
            row[name] += value
    return row


def decode_row(shape: ServerShape, batch: int, context: float) -> dict[str, float]:
    """The coefficients of one decode step of `batch` streams at `context` tokens each."""
    row = dict.fromkeys(COSTS, 0.0)
    row["fixed_s"] = 1.0
    row["decode_token_s"] = batch * (1.0 + shape.spec_tokens)
    row["decode_ctx_s"] = batch * context
    return row


def measure(
    point: Point, records: Sequence[StreamRecord], shape: ServerShape
) -> Measurement | None:
    """The point's measurement from its measured streams; None when none of them finished."""
    done = [r for r in records if r.status == "ok" and r.t_first_ns is not None]
    if not done:
        return None
    if point.kind == "decode":
        return _decode_measurement(point, done, shape)
    ttfts = [rates.ttft_s(r) for r in done]
    value = median(ttfts)
    if value is None:
        return None
    prompt = median(r.prompt_tokens or point.prompt_tokens for r in done) or point.prompt_tokens
    cached: float | None = 0.0
    if point.kind == "cached":
        reported = [r.cached_tokens for r in done if r.cached_tokens is not None]
        cached = median(reported) if reported else _block_floor(point.prefix_tokens, shape)
    prompt_n, cached_n = round(prompt), round(cached or 0)
    row = prefill_row(shape, prompt_n - cached_n, cached_n)
    return Measurement(
        point.name, point.kind, value, len(done), row,
        {"prompt_tokens": prompt_n, "cached_tokens": cached_n},
        tuple(prefill_steps(shape, prompt_n - cached_n, cached_n)),
    )  # fmt: skip


def _block_floor(tokens: int, shape: ServerShape) -> float:
    return float(tokens // shape.block_size * shape.block_size)


def _decode_measurement(
    point: Point, done: Sequence[StreamRecord], shape: ServerShape
) -> Measurement | None:
    gaps: list[float] = []
    contexts: list[float] = []
    for rep in sorted({r.rep for r in done}):
        cohort = [r for r in done if r.rep == rep and len(r.chunk_ns) > 1]
        if len(cohort) < point.streams:
            continue  # a stream failed: the steps were not all of batch B
        g, c = _window_gaps(cohort, shape)
        gaps += g
        contexts += c
    if not gaps:
        return None
    # The mean, not the median: a client that reads one chunk late reads the next one early,
    # so gaps skew right and their median runs below the step; the mean is the window's time
    # over its steps, what a decode-only rate divides by.
    value = sum(gaps) / len(gaps)
    context = sum(contexts) / len(contexts)
    return Measurement(
        point.name, point.kind, value, len(gaps), decode_row(shape, point.streams, context),
        {"prompt_tokens": point.prompt_tokens, "context_tokens": round(context, 1),
         "batch": point.streams},
    )  # fmt: skip


def _window_gaps(
    cohort: Sequence[StreamRecord], shape: ServerShape
) -> tuple[list[float], list[float]]:
    """Gaps (s) while every stream of the cohort decoded, with each gap's context (tokens);
    none where they never all decoded at once (a server with fewer seats than the batch: a
    decode-b8 on 4 seats was fitted as batch 8 from gaps of 4, decode_token_s 58% low)."""
    opens = max(r.chunk_ns[0] for r in cohort)
    closes = min(r.chunk_ns[-1] for r in cohort)
    if opens >= closes:
        return [], []
    inside = _gaps(cohort, opens, closes, shape)
    if len(inside[0]) >= MIN_WINDOW_GAPS * len(cohort):
        return inside
    return _gaps(cohort, opens, max(r.chunk_ns[-1] for r in cohort), shape)


def _gaps(
    cohort: Sequence[StreamRecord], opens: int, closes: int, shape: ServerShape
) -> tuple[list[float], list[float]]:
    gaps: list[float] = []
    contexts: list[float] = []
    for r in cohort:
        tokens = _chunk_token_counts(r)
        prompt = r.prompt_tokens or 0
        emitted = tokens[0]
        for (a, b), n in zip(pairwise(r.chunk_ns), tokens[1:], strict=True):
            if a >= opens and b <= closes:
                gaps.append((b - a) / 1e9)
                contexts.append(prompt + emitted + shape.spec_tokens)
            emitted += n
    return gaps, contexts


def _chunk_token_counts(r: StreamRecord) -> list[float]:
    """Tokens per content chunk: the server's where it said, else spread evenly."""
    if r.chunk_tokens is not None and len(r.chunk_tokens) == len(r.chunk_ns):
        return [float(n) for n in r.chunk_tokens]
    first = float(rates.first_chunk_tokens(r))
    rest = (r.completion_tokens - first) / max(len(r.chunk_ns) - 1, 1)
    return [first] + [rest] * (len(r.chunk_ns) - 1)


@dataclass(frozen=True, slots=True)
class Speculation:
    """Draft tokens per step and their acceptance, and what they were read from."""

    tokens: int
    acceptance: float | None
    mean_tokens_per_chunk: float | None
    source: str


def speculation(records: Iterable[StreamRecord]) -> Speculation:
    """k and a from decode chunks (the first chunk and each stream's last, which max_tokens
    may cut, are left out)."""
    sizes: list[int] = []
    for r in records:
        if r.status == "ok" and r.chunk_tokens is not None and len(r.chunk_tokens) > 2:
            sizes += r.chunk_tokens[1:-1]
    if not sizes:
        return Speculation(0, None, None, "no per-chunk token counts (continuous usage)")
    mean = sum(sizes) / len(sizes)
    if mean < SPEC_MEAN:
        return Speculation(0, None, mean, f"usage per chunk: {mean:.3f} tokens per chunk")
    common = [n for n, seen in Counter(sizes).items() if seen >= SPEC_SHARE * len(sizes)]
    k = max(common) - 1
    return Speculation(k, _acceptance(k, mean), mean, f"usage per chunk: {mean:.3f} tokens "
                       f"per chunk, at most {k + 1} in 1% of chunks or more")  # fmt: skip


SPEC_COUNTERS = ("spec_decode_num_drafts_total", "spec_decode_num_draft_tokens_total",
                 "spec_decode_num_accepted_tokens_total")  # fmt: skip


def counter_deltas(
    samples: Iterable[MetricsSample], names: Sequence[str] = SPEC_COUNTERS
) -> dict[str, float]:
    """Each counter's rise over one run's scrapes (absent counters left out)."""
    seen = [s.values for s in samples if s.error is None]
    out: dict[str, float] = {}
    for name in names:
        values = [v[name] for v in seen if name in v]
        if len(values) >= 2:
            out[name] = values[-1] - values[0]
    return out


# The server's own TTFT histogram, beside the client's timing of the same requests. (vLLM's
# iteration_tokens_total is no step count to check the schedule against: v1 records it only
# for steps that emit a token, never for a partial prefill's chunk.)
WITNESS_COUNTERS = ("time_to_first_token_seconds_sum", "time_to_first_token_seconds_count")


@dataclass(frozen=True, slots=True)
class TtftWitness:
    """The server's mean TTFT over one point's run (warmups and primes included: its histogram
    rises for them) against the client's mean over the same requests; the gap is the HTTP path
    and the client, which the fitted request overhead holds. The means are kept to six
    figures (as the profile file holds them)."""

    # `probe` in a profile written before calibration's points had their own name
    point: str = field(metadata=json_meta(legacy=("probe",)))
    requests: int
    server_ttft_s: float = json_field(key="server_ttft_mean_s")
    client_ttft_s: float = json_field(key="client_ttft_mean_s")

    @property
    def gap_s(self) -> float:
        """What the client sees beyond the server's own TTFT."""
        return self.client_ttft_s - self.server_ttft_s


def read_witnesses(fit: Mapping[str, Any]) -> list[TtftWitness]:
    """A profile's `fit` block's server witnesses (none: the server had no TTFT histogram)."""
    return [from_json(TtftWitness, w) for w in fit.get("server_witness") or ()]


def ttft_witness(
    point: Point, records: Sequence[StreamRecord], deltas: Mapping[str, float]
) -> TtftWitness | None:
    """The witness from all of a point's run's records and its counters' rises; None where the
    server has no TTFT histogram, or its count is not the run's requests (other traffic)."""
    timed = [t for r in records if r.status == "ok" and (t := rates.ttft_s(r)) is not None]
    count = deltas.get("time_to_first_token_seconds_count")
    if not timed or count is None or round(count) != len(timed):
        return None
    server = deltas["time_to_first_token_seconds_sum"] / len(timed)
    client = sum(timed) / len(timed)
    return TtftWitness(point.name, len(timed), six_figures(server), six_figures(client))


def speculation_from_counters(deltas: Mapping[str, float]) -> Speculation | None:
    """k and a from the server's own spec-decode counters, which outrank the chunks: k is
    draft tokens per draft, and the accepted tokens per draft are a + ... + a^k. None where
    the server counted no draft."""
    drafts = deltas.get("spec_decode_num_drafts_total", 0.0)
    if drafts <= 0 or not {*SPEC_COUNTERS} <= set(deltas):
        return None
    k = round(deltas["spec_decode_num_draft_tokens_total"] / drafts)
    accepted = deltas["spec_decode_num_accepted_tokens_total"] / drafts
    return Speculation(k, _acceptance(k, 1 + accepted), 1 + accepted,
                       "server counters (vllm:spec_decode_*)")  # fmt: skip


def _acceptance(k: int, mean: float) -> float:
    """a in [0, 1] with 1 + a + ... + a^k = mean (bisection: the sum grows with a)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(mid**i for i in range(k + 1)) < mean:
            lo = mid
        else:
            hi = mid
    return round((lo + hi) / 2, 4)


def six_figures(value: float) -> float:
    """Six significant figures: enough for a 0.1% fit, short enough to read."""
    return float(f"{value:.6g}")
