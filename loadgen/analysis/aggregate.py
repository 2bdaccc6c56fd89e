"""Rates and server facts over windows of a run: the joint-decode aggregate of a cohort, the
server counters of the measured phase, and the interference a whale's prefill causes.

Joint-decode window: opens when every stream of the cohort has its first token, closes when the
first stream's last token arrives. `steady` only if all N decoded at one instant (every first
token before the first finish). When not steady (a closed loop's rep: its streams follow each
other through the seats) the window is the time some stream of the cohort was decoding (the
union of each stream's first -> last content chunk), labelled `decoding`, and the tokens are
the streams' decode tokens (first chunk's excluded), the per-stream rate's own units: the
first span tried (first first token -> last last token) held every later stream's prefill,
and deep_decode at concurrency 1 read 348 tok/s beside a single stream's 723. So the aggregate
over `decoding` is the per-stream rate times the mean number of streams decoding at once, and
equals it at concurrency 1.
In a steady window, tokens: the server's `generation_tokens_total` increase over the window
(linear interpolation between the polls bracketing each edge, or the nearest poll outside the
polled range: each edge says which), cross-checked with the client's own tokens in chunks
arriving inside the window. The server counter is the headline unless other streams outside
the cohort were decoding in the window (it would count their tokens too), or the window spans
fewer than SERVER_MIN_POLLS poll intervals (interpolating a counter across polls much longer
than the window reads idle time as decode): then the client sum is.
"""

from __future__ import annotations

from typing import Any

from loadgen.analysis import rates
from loadgen.analysis.baselines import prefill_tokens
from loadgen.analysis.occupancy import Seat
from loadgen.analysis.stats import describe, median
from loadgen.analysis.streams import rate_after, window_rate
from loadgen.analysis.timeline import Timeline
from loadgen.codec import to_json
from loadgen.records import StreamRecord

NS = rates.NS
GENERATION = "generation_tokens_total"
# Poll intervals a window must span before the server counter's delta over it is the headline.
SERVER_MIN_POLLS = 4
# An unnamed group is a whale only if its prompt is this many times its neighbours' (seed 000:
# 72.6k against 4k minnows).
WHALE_PROMPT_RATIO = 4

# Discrete event counters read between whole polls: (summary key, canonical metric).
EVENT_COUNTERS = (
    ("preemptions", "num_preemptions_total"),
    ("prefix_hits", "prefix_cache_hits_total"),
    ("prefix_queries", "prefix_cache_queries_total"),
    ("spec_drafts", "spec_decode_num_drafts_total"),
    ("spec_draft_tokens", "spec_decode_num_draft_tokens_total"),
    ("spec_accepted", "spec_decode_num_accepted_tokens_total"),
    ("steps", "iteration_tokens_total_count"),
    ("step_tokens", "iteration_tokens_total_sum"),
)


def token_sources(records: list[StreamRecord]) -> list[str]:
    """The token sources of the records whose counts enter a figure: ok streams, and failed
    ones that delivered tokens (an HTTP 500's zero, counted from its zero chunks, made a
    group's source read `mixed:chunk_count+...`); every record's where none did."""
    carrying = [r for r in records if r.status == "ok" or r.completion_tokens] or records
    return sorted({r.token_source for r in carrying})


def token_source_of(records: list[StreamRecord]) -> str:
    """The records' token source (token_sources), or `mixed:a+b` when they differ."""
    sources = token_sources(records)
    return sources[0] if len(sources) == 1 else "mixed:" + "+".join(sources)


def span_ns(records: list[StreamRecord]) -> tuple[int, int] | None:
    """[earliest intended send, latest end] of the records: their wall-clock span."""
    ends = [t for r in records for t in (r.t_done_ns, r.t_last_ns, r.t_sent_ns) if t is not None]
    if not records or not ends:
        return None
    return min(r.t_intended_ns for r in records), max(ends)


def reps_wall_s(records: list[StreamRecord]) -> float | None:
    """The reps' spans summed (s): the run's wall less loadgen's own time between reps (the
    /metrics scrapes and primes at a rep's edges), which no model of the server predicts."""
    spans = [span_ns([r for r in records if r.rep == rep]) for rep in {r.rep for r in records}]
    walls = [(s[1] - s[0]) / NS for s in spans if s is not None]
    return sum(walls) if walls else None


def joint_decode(
    cohort: list[StreamRecord], everyone: list[StreamRecord], timeline: Timeline
) -> dict[str, Any] | None:
    """The cohort's joint-decode aggregate (module docstring); None if nothing decoded."""
    live: list[StreamRecord] = []
    firsts: list[int] = []
    lasts: list[int] = []
    for r in cohort:
        if r.status == "ok" and r.t_first_ns is not None and r.t_last_ns is not None:
            live.append(r)
            firsts.append(r.t_first_ns)
            lasts.append(r.t_last_ns)
    if not live:
        return None
    opens, closes = max(firsts), min(lasts)
    steady = len(live) == len(cohort) and opens < closes
    decoding_ns, peak = decoding_time(live)
    out: dict[str, Any] = {
        "n": len(cohort),
        "decoding": len(live),
        "peak_decoding": peak,
        "steady": steady,
        "per_stream_tok_s": _per_stream(live),
        "tok_s": None,
        "token_source": None,
    }
    if not steady:
        return out | _decoding_aggregate(live, min(firsts), max(lasts), decoding_ns)
    t0, t1 = opens, closes
    out["window"] = window_json(t0, t1) | {"kind": "joint"}
    rates_in = [window_rate(r, t0, t1) for r in live]
    client_tokens = sum(w.tokens for w in rates_in if w)
    client_chunks = sum(w.chunks for w in rates_in if w)
    dur = (t1 - t0) / NS
    out["client"] = {
        "tokens": client_tokens,
        "tok_s": client_tokens / dur,
        "chunks": client_chunks,
        "chunks_per_s": client_chunks / dur,
        "token_source": token_source_of(live),
    }
    ids = {r.id for r in cohort}
    shared = sorted(
        r.id
        for r in everyone
        if r.id not in ids
        and r.t_first_ns is not None
        and r.t_first_ns < t1
        and (r.t_last_ns or 0) > t0
    )
    server = _server_tokens(timeline, t0, t1)
    out["server"] = server
    out["shared_with"] = shared
    if server is not None and server["resolvable"] and not shared:
        out["tok_s"], out["token_source"] = server["tok_s"], "server_counter"
        out["cross_check"] = server["tokens"] / client_tokens if client_tokens else None
    else:
        out["tok_s"], out["token_source"] = out["client"]["tok_s"], out["client"]["token_source"]
    return out


def decoding_time(records: list[StreamRecord]) -> tuple[int, int]:
    """(ns during which at least one record was between its first and last content chunk, the
    most records in that phase at one instant); a stream ending as another begins is not both."""
    edges = sorted(
        (t, step)
        for r in records
        if r.t_first_ns is not None and r.t_last_ns is not None and r.t_last_ns > r.t_first_ns
        for t, step in ((r.t_first_ns, 1), (r.t_last_ns, -1))
    )
    busy, peak, live, since = 0, 0, 0, 0
    for t, step in edges:
        if live == 0:
            since = t
        live += step
        peak = max(peak, live)
        if live == 0:
            busy += t - since
    return busy, peak


def _decoding_aggregate(
    live: list[StreamRecord], t0: int, t1: int, decoding_ns: int
) -> dict[str, Any]:
    """The aggregate of a cohort whose streams never all decoded at once: decode tokens (the
    per-stream rate's) over the time some stream decoded, from the client's own counts (a
    counter polled every 0.25 s cannot be cut at each stream's first and last chunk)."""
    window = window_json(t0, t1) | {"kind": "decoding", "decoding_s": decoding_ns / NS}
    if not decoding_ns:
        return {"window": window}
    tokens = sum(rates.decode_tokens(r) for r in live if rates.decode_window_s(r))
    chunks = sum(r.chunks - 1 for r in live if rates.decode_window_s(r))
    dur = decoding_ns / NS
    source = token_source_of(live)
    client = {"tokens": tokens, "tok_s": tokens / dur, "chunks": chunks,
              "chunks_per_s": chunks / dur, "token_source": source}  # fmt: skip
    return {"window": window, "client": client, "server": None, "shared_with": [],
            "tok_s": tokens / dur, "token_source": source}  # fmt: skip


def _server_tokens(timeline: Timeline, t0: int, t1: int) -> dict[str, Any] | None:
    d = timeline.delta(GENERATION, t0, t1)
    if d is None:
        return None
    tokens, open_edge, close_edge = d
    interval = timeline.poll_interval_s(t0, t1)
    return {
        "tokens": tokens,
        "tok_s": tokens * NS / (t1 - t0),
        "edges": {"open": open_edge, "close": close_edge},
        "polls_inside": len(timeline.times_between(t0, t1)),
        "resolvable": interval is not None and (t1 - t0) / NS >= SERVER_MIN_POLLS * interval,
    }


def _per_stream(live: list[StreamRecord]) -> dict[str, Any]:
    """Each stream's decode-only rate described, and `pooled`: the streams' decode tokens over
    the sum of their own decode windows (the aggregate's units: at concurrency 1 the two are
    one figure; a mean of rates weighs a short stream like a long one)."""
    d = describe(rates.decode_tok_s(r) for r in live)
    timed = [r for r in live if rates.decode_window_s(r)]
    window = sum(rates.decode_window_s(r) or 0.0 for r in timed)
    pooled = sum(rates.decode_tokens(r) for r in timed) / window if window else None
    return {k: d[k] for k in ("n", "mean", "min", "median", "max")} | {"pooled": pooled}


def window_json(t0: int, t1: int) -> dict[str, float]:
    """A run-clock window [t0, t1] in seconds."""
    return {"from_s": t0 / NS, "to_s": t1 / NS, "duration_s": (t1 - t0) / NS}


def server_window(timeline: Timeline, t0: int, t1: int) -> dict[str, Any]:
    """What the server's /metrics say about [t0, t1]: kv% peak beside the window's length (a
    peak of polls grows with the number of polls), event counter increases, running/waiting
    peaks and plateaus, prefix hit rate, speculative acceptance, tokens per engine step."""
    if not timeline.available:
        return {"available": False, "note": "no server metrics"}
    part = timeline.polled_part(t0, t1)
    inside = timeline.times_between(t0, t1)
    if part is not None and not inside:
        return {"available": False, "note": "no poll of the server inside the window (its "
                "/metrics stopped answering, or metrics.jsonl lost those lines)"}  # fmt: skip
    out: dict[str, Any] = {
        "available": True,
        "window": window_json(t0, t1),
        # Set where the polls fall short of the window: its counters and peaks are of this part.
        "polled": None if part is None else window_json(*part),
        "polls": len(inside),
        "poll_interval_s": timeline.poll_interval_s(t0, t1),
    }
    kv = timeline.max_between("kv_cache_usage_perc", t0, t1)
    out["kv_peak_perc"] = None if kv is None else kv[0] * 100
    out["kv_peak_t_s"] = None if kv is None else kv[1] / NS
    for key, name in (("running", "num_requests_running"), ("waiting", "num_requests_waiting")):
        peak = timeline.max_between(name, t0, t1)
        plateau = timeline.plateau(name, t0, t1)
        out[key] = {
            "max": None if peak is None else peak[0],
            "plateau": None if plateau is None else to_json(plateau),
        }
    counts: dict[str, float | None] = {}
    for key, name in EVENT_COUNTERS:
        d = timeline.outer_delta(name, t0, t1)
        counts[key] = None if d is None else d[0]
    out["counters"] = counts
    gen = timeline.delta(GENERATION, t0, t1)
    out["generation_tokens"] = None if gen is None else gen[0]
    # Over the window's length only where the polls span it: past the last poll the counter
    # reads flat, and 4.3 s of tokens over an 8.4 s window read 0.0 tok/s.
    out["generation_tok_s"] = (
        gen[0] * NS / (t1 - t0) if part is None and gen is not None and t1 > t0 else None
    )
    out["preemptions"] = counts["preemptions"]
    out["prefix_hit_rate"] = _ratio(counts["prefix_hits"], counts["prefix_queries"])
    out["spec_acceptance"] = _ratio(counts["spec_accepted"], counts["spec_draft_tokens"])
    drafts, accepted = counts["spec_drafts"], counts["spec_accepted"]
    out["spec_emitted_per_step"] = (
        _ratio(accepted + drafts, drafts) if drafts is not None and accepted is not None else None
    )
    out["tokens_per_step"] = _ratio(counts["step_tokens"], counts["steps"])
    return out


def _ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or not den else num / den


def find_whale(records: list[StreamRecord]) -> tuple[str, list[str]] | None:
    """(whale group, minnow groups) when groups ran together in some rep. The whale is a group
    named *whale*, else the group with the largest median prompt if that is at least
    WHALE_PROMPT_RATIO x every group it overlapped; minnows are the groups overlapping it."""
    groups = sorted({r.group for r in records})
    if len(groups) < 2:
        return None
    named = [g for g in groups if "whale" in g.lower()]
    sizes = {g: median(prefill_tokens(r) for r in records if r.group == g) or 0 for g in groups}
    whale = named[0] if named else max(groups, key=lambda g: (sizes[g], g))
    minnows = [g for g in groups if g != whale and _overlap_in_some_rep(records, whale, g)]
    if not named and any(sizes[whale] < WHALE_PROMPT_RATIO * sizes[g] for g in minnows):
        return None
    return (whale, minnows) if minnows else None


def _overlap_in_some_rep(records: list[StreamRecord], a: str, b: str) -> bool:
    for rep in sorted({r.rep for r in records}):
        sa = span_ns([r for r in records if r.group == a and r.rep == rep])
        sb = span_ns([r for r in records if r.group == b and r.rep == rep])
        if sa and sb and sa[0] < sb[1] and sb[0] < sa[1]:
            return True
    return False


def in_flight_during(
    minnows: list[StreamRecord], p0: int | None, p1: int | None
) -> list[StreamRecord]:
    """The minnows a whale's prefill [p0, p1) can touch: sent before it ended and not done
    before it began. Every minnow of a rep was once listed under every whale: a 20k-request
    trace wrote 84 MB of its 248 MB summary so, and a minnow sent an hour after a whale
    counted as one that got its first token after that whale's prefill."""
    if p0 is None or p1 is None:
        return minnows
    return [m for m in minnows if rates.life_overlaps(m, p0, p1)]


def interference(
    whale: StreamRecord, minnows: list[StreamRecord], whale_seat: Seat | None
) -> dict[str, Any]:
    """Each minnow's TTFT and decode rate during the whale's prefill [admit, first token) and
    its steady decode rate after it, for the minnows in flight during that prefill."""
    p0 = whale_seat.admit_ns if whale_seat else whale.t_sent_ns
    p1 = whale.t_first_ns if whale.t_first_ns is not None else (whale.t_done_ns or p0)
    rows = []
    for m in sorted(in_flight_during(minnows, p0, p1), key=lambda r: (r.t_sent_ns or 0, r.id)):
        during = None
        # p1 is never None once p0 is not; the test says so to the type checker.
        if (
            m.t_first_ns is not None
            and m.t_last_ns is not None
            and p0 is not None
            and p1 is not None
        ):
            w = window_rate(m, max(m.t_first_ns, p0), min(p1, m.t_last_ns))
            during = None if w is None else to_json(w)
        after = rate_after(m, p1) if p1 is not None else None
        first_during = m.t_first_ns is not None and p1 is not None and m.t_first_ns < p1
        rows.append(
            {
                "id": m.id,
                "group": m.group,
                "ttft_s": rates.ttft_s(m),
                "first_token": "during" if first_during else "after",
                "decode_during": during,
                "decode_after": None if after is None else to_json(after),
            }
        )
    return {
        "whale": whale.id,
        "whale_ttft_s": rates.ttft_s(whale),
        "whale_prefill": None if p0 is None or p1 is None else window_json(p0, p1),
        "minnows": rows,
    }
