"""Why a stream waited or crawled: one verdict per stream, with the evidence that decided it.

Rules, in order (DESIGN.md's vocabulary; thresholds are the named constants below):
1. `error`: the stream failed; evidence is the error class and message.
2. The *excess wait* is [t_sent, t_first - normal prefill time] (limits.py): the part of TTFT
   beyond the stream's own prefill. Each instant of it is classified, first match wins
   (pool.py defines the pool evidence):
   `pool_pressure` (the pool was full or preempting, or the polls show the stream queued with
   no room in the pool for its prompt: then it waits for blocks whatever else holds it),
   `admission_cap` (the FCFS seat model, occupancy.py, says the stream was still queued),
   `prefill_hol` (admitted, while a stream ahead of it in occupancy.py's admission order, FCFS
   by t_sent except among streams sent within its tie window, was in its prefill interval
   [admit, t_first): FCFS schedulers give a later arrival's prefill budget only after the
   earlier ones'), `pool_pressure` (an unresolved preemption:
   a preempted request is still queued for its blocks, running below the cap), else
   `unexplained` (e.g. a deep prompt's own prefill judged against a shallow baseline, or a cap
   nobody reported: without a known or inferred cap a queue cannot be told from a slow
   prefill, so no cap is blamed).
3. `client_limited`: loadgen sent it more than CLIENT_LATE_S late and that lateness is at least
   the excess wait (the client, not the server, was the bigger delay). And, after every rule
   below: when its timing error bound (selferror.py: send lateness or event-loop lag in its
   TTFT window) exceeds the tolerance (5% of TTFT or 1 ms), the verdict becomes
   `client_limited` (the server verdict kept as `server_verdict`) unless that verdict's own
   evidence outweighs the error: a decode-phase verdict (rationed_decode, a preemption stall),
   a wait held CLIENT_ERROR_OUTWEIGH x the error bound, or `admitted` with its TTFT that much
   inside the admitted limit (late stamps only lengthen TTFT); then it stands, with the error
   in its evidence as `client_error`. The run's client_limited flag and banner count both.
4. If TTFT > ADMITTED_FACTOR x normal prefill + ADMITTED_SLACK_S, the wait verdict is whichever
   of pool_pressure / admission_cap / prefill_hol held longest (ties in that order), provided
   it held at least as long as the unexplained time. A stream waiting first on the cap, then
   on a prefill, is therefore judged by the longer phase; its evidence lists both phases.
5. A *preemption stall*: its decode stalled (a chunk gap >= PREEMPT_STALL_FACTOR x its median
   gap) across polls where the preemption counter rose; it cost the gap minus the median gap.
   One verdict per stream, the phase that cost it most: with both a wait verdict and a stall,
   `pool_pressure` if the stall cost at least the wait verdict's held time, else the wait
   verdict (the other phase is kept in the evidence: `preemption` or `wait`); a stall alone
   gives `pool_pressure`.
6. `rationed_decode`: its decode rate while other streams were in prefill fell below
   RATION_FRACTION of its own later steady rate. The *stretches* are the merged prefill
   intervals of the other streams, clipped to its decode window [first token, last chunk];
   each is judged: "during" is the stretch, "steady" its rate over the decode time after the
   stretch outside every stretch (needs two chunks there). A stretch counts only if long
   enough for RATION_MIN_WINDOW_TOKENS tokens at the steady rate and at least
   RATION_MIN_SHARE of its decode window: a blip in a long decode is no crawl. The stream is
   rationed if any counting stretch is below the fraction; the evidence is the counting
   stretch with the lowest fraction (else the lowest of all, marked not rationed).

7. Otherwise `admitted`. A stream alone on the server never gets another verdict: every rule
   above needs another stream, a full pool, or its own lateness as evidence.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from loadgen.analysis import rates
from loadgen.analysis.baselines import (
    Cap,
    PrefillBaseline,
    expected_prefill_s,
    group_min_ttft,
    prefill_baseline,
    prefill_tokens,
    resolve_cap,
)
from loadgen.analysis.cached import CacheEstimates, estimate_cached
from loadgen.analysis.occupancy import Prefills, Seat, prefill_ahead, seats
from loadgen.analysis.pool import PoolEvidence
from loadgen.analysis.selferror import client_error_evidence
from loadgen.analysis.stats import median
from loadgen.analysis.streams import StreamWindows, WindowRate
from loadgen.analysis.timeline import Timeline
from loadgen.analysis.warmth import cache_warmth, meant_cold, salted_groups
from loadgen.codec import to_json
from loadgen.records import MetricsSample, StreamRecord
from loadgen.run_manifest import RunManifest

NS = rates.NS
VERDICTS = (
    "admitted",
    "admission_cap",
    "prefill_hol",
    "rationed_decode",
    "pool_pressure",
    "client_limited",
    "error",
)
ADMITTED_FACTOR = 1.5
ADMITTED_SLACK_S = 0.05
CLIENT_LATE_S = 0.025
# A server verdict stands against the client's error bound b when its own evidence exceeds
# this x b: TTFT's stamps are late by at most b, and the expected prefill (from other streams'
# TTFTs) by at most ADMITTED_FACTOR x b, so no error within b can have produced it.
CLIENT_ERROR_OUTWEIGH = 1 + ADMITTED_FACTOR
RATION_FRACTION = 0.25
RATION_MIN_WINDOW_TOKENS = 4
RATION_MIN_SHARE = 0.1
PREEMPT_STALL_FACTOR = 10
MAX_EVIDENCE_SAMPLES = 6
MAX_EVIDENCE_STREAMS = 8
# Tie order when two waits held equally long.
_WAIT_ORDER = ("pool_pressure", "admission_cap", "prefill_hol")


@dataclass(frozen=True, slots=True)
class Verdict:
    name: str
    evidence: dict[str, Any]


@dataclass(frozen=True)
class VerdictContext:
    """Everything a verdict is judged against, shared by all streams of one run."""

    records: list[StreamRecord]
    timeline: Timeline
    cap: Cap
    baseline: PrefillBaseline
    seats: dict[str, Seat]
    pool: PoolEvidence
    # Per stream, when a stream ahead of it was prefilling (occupancy.prefill_ahead).
    prefill_ahead: dict[str, list[tuple[int, int]]]
    prefills: Prefills
    group_min_ttft: dict[str, float] = field(default_factory=dict)
    loop_lag_max_ms: float | None = None
    # Groups whose prompts were meant to be cold (warmth.py), and whether they are all groups.
    salted: frozenset[str] = frozenset()
    all_salted: bool = False
    cached: CacheEstimates = field(default_factory=CacheEstimates)
    # By stream id, its server's wait for a core around its TTFT, where the run read a server
    # on its host (selferror.stream_server_waits): a term of its error bound.
    server_waits: Mapping[str, int] = field(default_factory=dict)


def _all_cold(measured: list[StreamRecord], salted: frozenset[str]) -> bool:
    """Every measured stream meant to be cold: the server-wide hit counter then witnesses."""
    return bool(measured) and all(meant_cold(r, salted) for r in measured)


def build_context(
    records: list[StreamRecord],
    timeline: Timeline,
    manifest: RunManifest,
    server_waits: Mapping[str, int] | None = None,
) -> VerdictContext:
    """Resolve the cap and baseline and model every stream's seat; `server_waits` as
    VerdictContext keeps them."""
    cap = resolve_cap(manifest, timeline)
    client = manifest.client or {}
    salted = salted_groups(manifest)
    est = estimate_cached(records, timeline, manifest)
    baseline = prefill_baseline(records, est.tokens, est.suspect)
    fastest = group_min_ttft(records)
    normal = {r.id: expected_prefill_s(r, baseline, fastest, est.tokens.get(r.id)) for r in records}
    modelled = seats(records, cap.value, normal)
    return VerdictContext(
        records=records,
        timeline=timeline,
        cap=cap,
        baseline=baseline,
        seats=modelled,
        prefill_ahead=prefill_ahead(modelled),
        prefills=Prefills(modelled),
        pool=PoolEvidence(timeline, modelled, cap.value, dict(manifest.server or {})),
        group_min_ttft=fastest,
        loop_lag_max_ms=client.get("loop_lag_max_ms"),
        salted=salted,
        cached=est,
        all_salted=_all_cold([r for r in records if r.phase == "measure"], salted),
        server_waits=server_waits or {},
    )


def classify_streams(ctx: VerdictContext) -> dict[str, Verdict]:
    """A verdict for every record of the run, by stream id; a stream meant to be cold that was
    served from cache says so in its evidence (`cache_warm`, warmth.py). Judged in admission
    order, so the indexes of the streams ahead (ctx.prefills, ctx.pool) each move one way."""
    out = {}
    for r in sorted(ctx.records, key=lambda r: _rank(r, ctx)):
        verdict = classify(r, ctx)
        warm = cache_warmth(r, ctx.timeline, ctx.salted, counter_usable=ctx.all_salted)
        if warm is not None:
            verdict = Verdict(verdict.name, verdict.evidence | {"cache_warm": warm})
        out[r.id] = verdict
    return {r.id: out[r.id] for r in ctx.records}


def _rank(rec: StreamRecord, ctx: VerdictContext) -> int:
    seat = ctx.seats.get(rec.id)
    return -1 if seat is None else seat.rank


def classify(rec: StreamRecord, ctx: VerdictContext) -> Verdict:
    """One stream's verdict by the module's rules, then judged against the client's own error."""
    verdict = _server_verdict(rec, ctx)
    own = (
        client_error_evidence(rec, ctx.server_waits.get(rec.id))
        if verdict.name != "error"
        else None
    )
    if own is None:
        return verdict
    if _outweighs(verdict, own["error_bound_s"]):
        return Verdict(verdict.name, verdict.evidence | {"client_error": own})
    return Verdict("client_limited", verdict.evidence | own | {"server_verdict": verdict.name})


def _outweighs(verdict: Verdict, bound_s: float) -> bool:
    """Whether a server verdict's own evidence is larger than the client's error could have
    made it: decode-phase verdicts span many chunk gaps, and a wait verdict stands when the
    wait it blames held CLIENT_ERROR_OUTWEIGH times the error bound."""
    ev = verdict.evidence
    if verdict.name == "rationed_decode" or "stall" in ev:
        return True
    if verdict.name == "admitted":
        # A late stamp only lengthens TTFT, so `admitted` stands when its TTFT is well inside
        # the admitted limit: the true one is smaller still.
        expected, ttft = ev.get("expected_prefill_s"), ev.get("ttft_s")
        if expected is None or ttft is None:
            return False
        margin = ADMITTED_FACTOR * expected + ADMITTED_SLACK_S - ttft
        return margin >= CLIENT_ERROR_OUTWEIGH * bound_s
    held = (ev.get("held_s") or {}).get(verdict.name)
    return held is not None and held >= CLIENT_ERROR_OUTWEIGH * bound_s


def _server_verdict(rec: StreamRecord, ctx: VerdictContext) -> Verdict:
    if rec.status == "error" or rec.t_sent_ns is None:
        err = rec.error
        cls, msg = (err.cls, err.message) if err else ("unsent", "never sent")
        return Verdict(
            "error",
            {"reason": f"{cls}: {msg}", "class": cls, "message": msg, "http": rec.http_status},
        )
    seat = ctx.seats[rec.id]
    cached = ctx.cached.tokens.get(rec.id)
    expected = expected_prefill_s(rec, ctx.baseline, ctx.group_min_ttft, cached)
    base: dict[str, Any] = {
        "ttft_s": rates.ttft_s(rec),
        "expected_prefill_s": expected,
        "baseline": ctx.baseline.source,
    }
    if cached:
        base["cached_tokens"] = {"tokens": cached, "source": ctx.cached.source[rec.id]}
    if rec.over_max_tokens:
        # The server ignored the cap: every rate of this stream covers more than was asked.
        base["over_max_tokens"] = rec.over_max_tokens
    wait = _wait(rec, seat, expected, ctx)
    late_s = (rec.t_sent_ns - rec.t_intended_ns) / NS
    wait_verdict = wait.pop("verdict")
    if late_s > CLIENT_LATE_S and late_s >= wait["excess_s"]:
        reason = f"loadgen sent it {late_s * 1e3:.0f} ms late (> {CLIENT_LATE_S * 1e3:.0f} ms)"
        ev = {"reason": reason, "late_s": late_s, "threshold_s": CLIENT_LATE_S}
        return Verdict("client_limited", base | ev | _loop_lag(ctx) | {"wait": wait})
    stall = _preemption_stall(rec, ctx.timeline)
    if wait_verdict is not None and (
        stall is None or stall["cost_s"] < wait["held_s"][wait_verdict]
    ):
        extra = {} if stall is None else {"preemption": stall}
        return Verdict(wait_verdict, base | wait | _cap(ctx) | {"late_s": late_s} | extra)
    if stall is not None:
        extra = {} if wait_verdict is None else {"wait": wait | {"verdict": wait_verdict}}
        return Verdict("pool_pressure", base | stall | extra)
    ration = _rationing(rec, ctx)
    if ration is not None and ration["rationed"]:
        return Verdict("rationed_decode", base | ration)
    reason = _admitted_reason(rec, expected, wait)
    if ration is not None and not ration.get("judged", True):
        reason += f"; {ration['reason']}"
    ev = base | {"reason": reason}
    if wait["excess_s"] > 0:
        ev["wait"] = wait
    if ration is not None and ration.get("judged", True):
        ev["decode"] = ration
    return Verdict("admitted", ev)


def _admitted_reason(rec: StreamRecord, expected: float | None, wait: dict[str, Any]) -> str:
    if rec.t_first_ns is None:
        return "no content chunk (nothing to judge)"
    if wait["excess_s"] > 0 and wait["held_s"].get("unexplained", 0) > 0:
        return "first token later than its normal prefill, but no cap, prefill or pool was seen"
    if expected is None:
        return "no prefill baseline (no prompt sizes); nothing suggests a wait"
    return f"first token within {ADMITTED_FACTOR}x its normal prefill time"


def _wait(
    rec: StreamRecord, seat: Seat, expected: float | None, ctx: VerdictContext
) -> dict[str, Any]:
    """The excess-wait decomposition (rule 2) and the wait verdict, if any (rule 4)."""
    out: dict[str, Any] = {"excess_s": 0.0, "verdict": None, "held_s": {}, "phases": []}
    if rec.t_first_ns is None:
        return out
    ttft = (rec.t_first_ns - seat.sent_ns) / NS
    exp = expected or 0.0
    t0, t1 = seat.sent_ns, rec.t_first_ns - round(exp * NS)
    if t1 <= t0:
        return out
    # Only streams ahead of it in admission order (FCFS) can hold its prefill back.
    ahead = [(a, b) for a, b in ctx.prefill_ahead[rec.id] if a < t1 and b > t0]
    phases = _phases(t0, t1, seat, ahead, prefill_tokens(rec, ctx.cached.tokens.get(rec.id)), ctx)
    held: dict[str, float] = {}
    for state, a, b in phases:
        held[state] = held.get(state, 0.0) + (b - a) / NS
    out.update(
        excess_s=(t1 - t0) / NS,
        held_s=held,
        phases=[{"state": s, "from_s": a / NS, "to_s": b / NS} for s, a, b in phases],
    )
    if ttft <= ADMITTED_FACTOR * exp + ADMITTED_SLACK_S:
        return out
    best = max(_WAIT_ORDER, key=lambda v: (held.get(v, 0.0), -_WAIT_ORDER.index(v)))
    if held.get(best, 0.0) <= 0 or held[best] < held.get("unexplained", 0.0):
        return out
    out.update(
        verdict=best,
        reason=_wait_reason(best, held, ttft, exp),
        prefilling=ctx.prefills.first_ahead(seat.rank, t0, t1, MAX_EVIDENCE_STREAMS),
        samples=_samples(ctx.timeline, seat.sent_ns, rec.t_first_ns),
    )
    return out


def _phases(
    t0: int,
    t1: int,
    seat: Seat,
    ahead: list[tuple[int, int]],
    tokens: int | None,
    ctx: VerdictContext,
) -> list[tuple[str, int, int]]:
    """Merged (state, from_ns, to_ns) pieces of [t0, t1), state constant inside each piece;
    `ahead`: when streams ahead of it were prefilling (disjoint, in time order)."""
    cuts = {t0, t1, seat.admit_ns}
    for a, b in ahead:
        cuts.update((a, b))
    pool = ctx.pool
    # Only the polls where the pool evidence can change: cutting at every poll of the wait
    # made a queue that grows over the run quadratic (a 20,000-stream run waited ~300 polls a
    # stream, bench/trace_scale.yaml).
    cuts.update(pool.cuts_between(t0, t1, tokens))
    edges = sorted(c for c in cuts if t0 <= c <= t1)
    starts = [a for a, _ in ahead]
    # Pool evidence per poll interval, not per piece.
    pressed: dict[int, bool] = {}
    merged: list[tuple[str, int, int]] = []
    for a, b in pairwise(edges):
        mid = (a + b) / 2
        i = bisect.bisect_right(starts, mid) - 1
        prefilling = i >= 0 and mid < ahead[i][1]
        k = pool.interval(mid)
        if k not in pressed:
            pressed[k] = pool.full_in(k) or pool.no_room_in(k, seat, tokens)
        state = _state_in(k, pressed[k], mid < seat.admit_ns, prefilling, pool)
        if merged and merged[-1][0] == state and merged[-1][2] == a:
            merged[-1] = (state, merged[-1][1], b)
        else:
            merged.append((state, a, b))
    return merged


def _state_in(k: int, pressed: bool, capped: bool, prefilling: bool, pool: PoolEvidence) -> str:
    """A piece's state in poll interval k: `pressed` is the full / no-room evidence there,
    `capped` that the stream was not yet admitted."""
    if pressed:
        return "pool_pressure"
    if capped:
        return "admission_cap"
    if prefilling:
        return "prefill_hol"
    if pool.unresolved_in(k):
        return "pool_pressure"
    return "unexplained"


def _wait_reason(verdict: str, held: dict[str, float], ttft: float, expected: float) -> str:
    what = {
        "admission_cap": "queued for a seat (running at the cap, pool not full)",
        "prefill_hol": "admitted but behind another request's prefill",
        "pool_pressure": "KV pool full, preempting or without room for its prompt",
    }[verdict]
    parts = ", ".join(f"{k} {v:.3f}s" for k, v in sorted(held.items()))
    return f"TTFT {ttft:.3f}s vs normal prefill {expected:.3f}s: {what} longest ({parts})"


def _cap(ctx: VerdictContext) -> dict[str, Any]:
    return {"cap": ctx.cap.value, "cap_source": ctx.cap.source}


def _loop_lag(ctx: VerdictContext) -> dict[str, Any]:
    return {} if ctx.loop_lag_max_ms is None else {"loop_lag_max_ms": ctx.loop_lag_max_ms}


def sample_json(s: MetricsSample) -> dict[str, Any]:
    """A metrics poll as evidence: time and the gauges a verdict reads."""
    keys = {
        "running": "num_requests_running",
        "waiting": "num_requests_waiting",
        "kv": "kv_cache_usage_perc",
        "preemptions": "num_preemptions_total",
    }
    out: dict[str, Any] = {"t_s": s.t_ns / NS}
    out.update({k: s.values[name] for k, name in keys.items() if name in s.values})
    return out


def _samples(timeline: Timeline, t0: int, t1: int) -> list[dict[str, Any]]:
    """Up to MAX_EVIDENCE_SAMPLES polls spread evenly over [t0, t1] (first and last kept)."""
    lo, hi = timeline.span_between(t0, t1)
    picked: Sequence[int] = range(lo, hi)
    if len(picked) > MAX_EVIDENCE_SAMPLES:
        # Picked by index: a copy of every poll of the wait cost ~300 a stream on a long queue.
        step = (len(picked) - 1) / (MAX_EVIDENCE_SAMPLES - 1)
        picked = [lo + round(i * step) for i in range(MAX_EVIDENCE_SAMPLES)]
    return [sample_json(timeline.samples[i]) for i in picked]


def _preemption_stall(rec: StreamRecord, timeline: Timeline) -> dict[str, Any] | None:
    """Rule 5: the longest chunk gap, if a stall across polls where preemptions rose."""
    gaps = rates.chunk_gaps_ns(rec)
    if len(gaps) < 2 or not timeline.has("num_preemptions_total"):
        return None
    typical = median(gaps)
    i = max(range(len(gaps)), key=lambda j: gaps[j])
    if not typical or gaps[i] < PREEMPT_STALL_FACTOR * typical:
        return None
    a, b = rec.chunk_ns[i], rec.chunk_ns[i + 1]
    lo, hi = timeline.bracket(a)[0], timeline.bracket(b)[-1]
    rise = hi.values.get("num_preemptions_total", 0) - lo.values.get("num_preemptions_total", 0)
    if rise <= 0:
        return None
    return {
        "reason": f"decode stalled {gaps[i] / NS:.3f}s while preemptions rose by {rise:g}",
        "stall": {"from_s": a / NS, "to_s": b / NS, "gap_s": gaps[i] / NS},
        "median_gap_s": typical / NS,
        "cost_s": (gaps[i] - typical) / NS,
        "preemptions": rise,
        "samples": [sample_json(lo), sample_json(hi)],
    }


def _rationing(rec: StreamRecord, ctx: VerdictContext) -> dict[str, Any] | None:
    """Rule 6's measurement: decode during others' prefills vs its own later steady rate."""
    if rec.t_first_ns is None or rec.t_last_ns is None or len(rec.chunk_ns) < 3:
        return None
    # Other streams' prefills merged where they touch, clipped to rec's decode window.
    stretches = ctx.prefills.stretches(rec.t_first_ns, rec.t_last_ns)
    if not stretches:
        return None
    windows = StreamWindows(rec)
    # The steady rate after stretch i: outside every stretch, from its end to the stream's.
    gaps = [(b, nxt[0]) for (_, b), nxt in pairwise(stretches)]
    steady = windows.rates_from_each([*gaps, (stretches[-1][1], rec.t_last_ns)])
    judged = [(judged, i) for i, (start, split) in enumerate(stretches)
              if (judged := _judge_stretch(rec, start, split, windows.rate(start, split),
                                           steady[i])) is not None]  # fmt: skip
    if not judged:
        # Its whole decode inside others' prefills leaves no steady rate to compare with: at
        # a 256-token budget politeness's minnows decoded at 45 tok/s (211 elsewhere) and read
        # "admitted" as if judged.
        return {"rationed": False, "judged": False,
                "reason": "decode not judged for rationing: it ran inside others' prefills "
                          "with no steady stretch after them to compare"}  # fmt: skip
    (rationed, fraction, during, after), i = min(judged, key=lambda ji: (not ji[0][0], ji[0][1]))
    return {
        "rationed": rationed,
        "reason": (
            f"decode {during.tok_s:.3g} tok/s while others prefilled vs {after.tok_s:.3g} "
            f"tok/s after ({fraction:.2f} of steady; threshold {RATION_FRACTION})"
        ),
        "during": to_json(during),
        "steady": to_json(after),
        "fraction": fraction,
        "threshold": RATION_FRACTION,
        # Only the stretch reported names who prefilled: at a thousand streams in flight every
        # decode window holds a thousand prefills, and listing them for each stretch was most
        # of a run's analysis (41,000 streams: 190 s).
        "prefilling": ctx.prefills.first_during(*stretches[i], MAX_EVIDENCE_STREAMS),
    }


def _judge_stretch(
    rec: StreamRecord,
    start: int,
    split: int,
    during: WindowRate | None,
    steady: WindowRate | None,
) -> tuple[bool, float, WindowRate, WindowRate] | None:
    """A stretch's during-rate against the steady rate after it, outside every stretch:
    whether it was rationed, the fraction, the two rates; None when either is unmeasured."""
    assert rec.t_first_ns is not None and rec.t_last_ns is not None
    if during is None or steady is None or steady.chunks < 2 or steady.tok_s <= 0:
        return None
    fraction = during.tok_s / steady.tok_s
    span = split - start
    long_enough = (
        span / NS * steady.tok_s >= RATION_MIN_WINDOW_TOKENS
        and span >= RATION_MIN_SHARE * (rec.t_last_ns - rec.t_first_ns)
    )
    return long_enough and fraction < RATION_FRACTION, fraction, during, steady
