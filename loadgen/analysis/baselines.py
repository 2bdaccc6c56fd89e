"""What a verdict compares against: the server's seat cap and a stream's normal prefill time.

Seat cap (max_num_seqs), in order of trust:
1. run.json `server.max_num_seqs`, labelled with `server.source` (sim, flags, boot_log, metrics);
2. inferred from the metrics timeline: the running plateau (the run's highest
   `num_requests_running`, held in >= 2 polls while requests waited, no preemption had just
   happened and the pool had room for another request of the running ones' average KV share:
   a plateau the pool held is no cap), labelled `inferred`;
3. unknown (None).

Normal prefill time of a stream = its uncached prompt tokens (usage cached_tokens, else
cached.py's estimate) / a baseline prefill rate taken over streams not mostly served from cache:
1. `uncontended_streams`: the median of prompt_tokens / TTFT over streams whose whole wait for a
   first token overlapped no other stream's life (they prefilled alone); taken over the
   stream's own group when that group has such streams (prefill slows with depth, so a 4k
   prompt's rate underrates a 70k one's time), else over all groups;
2. `fastest_stream`: otherwise the highest prompt_tokens / TTFT of any stream in the run, i.e.
   the least contended prefill the run saw (a lower bound on the normal time: a deep prompt
   judged against a shallow one's rate shows an excess wait, which verdicts.py then blames
   only on what it can see: a queue, another prefill, a full pool).
The server's `prompt_tokens_total` counter is deliberately not used: vLLM adds a request's whole
prompt when its prefill completes, so its rate over one poll interval bursts far above the
real prefill rate and would make every stream look late. When a stream's prompt size is unknown
its group's fastest TTFT stands in for its normal prefill time.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field

from loadgen.analysis import rates
from loadgen.analysis.occupancy import end_ns
from loadgen.analysis.stats import median
from loadgen.analysis.timeline import Timeline
from loadgen.records import MetricsSample, StreamRecord
from loadgen.run_manifest import RunManifest

# KV usage at or above this fraction counts as a full pool (vLLM preempts just past it).
POOL_FULL = 0.98
KV = "kv_cache_usage_perc"
RUNNING = "num_requests_running"
WAITING = "num_requests_waiting"
PREEMPTIONS = "num_preemptions_total"
# More than this share of a prompt served from cache: its TTFT is no prefill measurement.
MOSTLY_CACHED = 0.5
# Polls a running plateau must span before it is taken as the cap.
PLATEAU_MIN_POLLS = 2


@dataclass(frozen=True, slots=True)
class Cap:
    value: int | None
    source: str | None  # server.source from run.json, "manifest", "inferred", or None


@dataclass(frozen=True, slots=True)
class PrefillBaseline:
    tok_s: float | None
    source: str  # "uncontended_streams" | "fastest_stream" | "none"
    streams: tuple[str, ...]
    # Groups with their own uncontended streams.
    by_group: Mapping[str, float] = field(default_factory=dict)
    # Streams left out because (maybe) served from cache: their TTFT is no prefill.
    cached_excluded: tuple[str, ...] = ()

    def rate_for(self, group: str) -> float | None:
        return self.by_group.get(group, self.tok_s)


def resolve_cap(manifest: RunManifest, timeline: Timeline) -> Cap:
    """The seat cap from run.json server facts, else inferred from the metrics (docstring)."""
    server = manifest.server or {}
    value = server.get("max_num_seqs")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return Cap(value, server.get("source") or "manifest")
    inferred = inferred_cap(timeline)
    return Cap(inferred, "inferred") if inferred is not None else Cap(None, None)


def inferred_cap(timeline: Timeline) -> int | None:
    """The running plateau: the highest `num_requests_running` of the run, if it was held with
    requests waiting, no preemption since the previous poll and room in the pool for another
    request in >= PLATEAU_MIN_POLLS polls; else None (a request waiting below the peak is an
    arrival between steps, and one waiting at a near-full pool may wait for blocks: no cap)."""
    samples = timeline.samples
    running = [s.values[RUNNING] for s in samples if RUNNING in s.values]
    if not running or max(running) <= 0:
        return None
    peak = max(running)
    pinned = sum(
        1
        for prev, s in zip([None, *samples], samples, strict=False)
        if s.values.get(RUNNING) == peak
        and s.values.get(WAITING, 0) >= 1
        and room_for_another(s)
        and not preemption_rose(prev, s)
    )
    return int(peak) if pinned >= PLATEAU_MIN_POLLS else None


def room_for_another(s: MetricsSample) -> bool:
    """True if one more request holding the running ones' average KV share fits under POOL_FULL
    (a request waiting without that room may wait for blocks, not for a seat)."""
    running = s.values.get(RUNNING, 0)
    return running > 0 and s.values.get(KV, 0.0) * (running + 1) / running < POOL_FULL


def preemption_rose(prev: MetricsSample | None, cur: MetricsSample) -> bool:
    """True if the preemption counter rose from poll `prev` to poll `cur`."""
    if prev is None:
        return False
    a, b = prev.values.get(PREEMPTIONS), cur.values.get(PREEMPTIONS)
    return a is not None and b is not None and b > a


def prompt_size(rec: StreamRecord) -> int | None:
    """Prompt tokens as the server counted them, else as the plan asked."""
    return rec.prompt_tokens if rec.prompt_tokens is not None else rec.requested_prompt_tokens


def prefill_tokens(rec: StreamRecord, cached: int | None = None) -> int | None:
    """Prompt tokens the server had to prefill: prompt minus cached prefix (as reported, else
    `cached`, an estimate from cached.py)."""
    prompt = prompt_size(rec)
    if prompt is None:
        return None
    known = rec.cached_tokens if rec.cached_tokens is not None else cached
    return max(prompt - (known or 0), 1)


def mostly_cached(rec: StreamRecord, cached: int | None = None) -> bool:
    """True if more than MOSTLY_CACHED of the prompt came from cache: its TTFT is request
    overhead and a cache lookup, which says nothing about the rate of a prefill."""
    prompt = prompt_size(rec)
    known = rec.cached_tokens if rec.cached_tokens is not None else cached
    return bool(prompt and known and known > MOSTLY_CACHED * prompt)


def _prefill_rate(rec: StreamRecord, cached: int | None) -> float | None:
    ttft = rates.ttft_s(rec)
    tokens = prefill_tokens(rec, cached)
    if rec.status != "ok" or ttft is None or ttft <= 0 or tokens is None:
        return None
    return tokens / ttft


def alone_ids(records: list[StreamRecord]) -> set[str]:
    """Streams that no other stream overlapped while they waited for their first token.

    Lives are [t_sent, end); a wait [s, f) overlaps #(starts < f) - #(ends <= s) lives, one of
    them its own.
    """
    lives = [(r.t_sent_ns, end_ns(r) or r.t_sent_ns) for r in records if r.t_sent_ns is not None]
    starts = sorted(s for s, _ in lives)
    ends = sorted(e for _, e in lives)
    out = set()
    for r in records:
        if r.t_sent_ns is None or r.t_first_ns is None or r.t_first_ns <= r.t_sent_ns:
            continue
        n = bisect.bisect_left(starts, r.t_first_ns) - bisect.bisect_right(ends, r.t_sent_ns)
        if n <= 1:
            out.add(r.id)
    return out


def prefill_baseline(
    records: list[StreamRecord],
    cached: Mapping[str, int] | None = None,
    suspect: frozenset[str] = frozenset(),
) -> PrefillBaseline:
    """The baseline prefill rate (module docstring). `cached` holds estimated cached tokens by
    stream id where usage did not report them; streams mostly served from cache, and `suspect`
    ones (cached.py: the hit counter rose while they shared the server), are left out."""
    est = cached or {}
    skipped = {r.id for r in records if r.id in suspect or mostly_cached(r, est.get(r.id))}
    rated = [(r, _prefill_rate(r, est.get(r.id))) for r in records if r.id not in skipped]
    rated = [(r, v) for r, v in rated if v is not None]
    lone = alone_ids(records)
    alone = [(r, v) for r, v in rated if r.id in lone]
    left_out = tuple(sorted(skipped))
    if alone:
        groups = sorted({r.group for r, _ in alone})
        by_group = {g: median(v for r, v in alone if r.group == g) or 0.0 for g in groups}
        ids = tuple(sorted(r.id for r, _ in alone))
        rate = median(v for _, v in alone)
        return PrefillBaseline(rate, "uncontended_streams", ids, by_group, left_out)
    if rated:
        best, rate = max(rated, key=lambda rv: (rv[1], rv[0].id))
        return PrefillBaseline(rate, "fastest_stream", (best.id,), cached_excluded=left_out)
    return PrefillBaseline(None, "none", (), cached_excluded=left_out)


def expected_prefill_s(
    rec: StreamRecord,
    baseline: PrefillBaseline,
    group_min_ttft: dict[str, float],
    cached: int | None = None,
) -> float | None:
    """Normal prefill time of rec's own prompt, less its cached tokens (module docstring)."""
    tokens = prefill_tokens(rec, cached)
    rate = baseline.rate_for(rec.group)
    if tokens is not None and rate:
        return tokens / rate
    return group_min_ttft.get(rec.group)


def group_min_ttft(records: list[StreamRecord]) -> dict[str, float]:
    """Fastest actual-send TTFT per group among ok streams."""
    out: dict[str, float] = {}
    for r in records:
        t = rates.ttft_s(r)
        if r.status == "ok" and t is not None:
            out[r.group] = min(t, out.get(r.group, t))
    return out
