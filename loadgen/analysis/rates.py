"""The per-stream timing quantities, each defined once. Inputs are StreamRecords (run-clock ns).

A stream has a *prefill* phase (send -> first content chunk) and a *decode* phase (first ->
last content chunk). Mixing them is the seeds' classic error, so no function here divides
total tokens by whole-request time.
"""

from __future__ import annotations

from itertools import pairwise

from loadgen.records import StreamRecord

NS = 1_000_000_000


def first_chunk_tokens(rec: StreamRecord) -> int:
    """Tokens carried by the first content chunk.

    From continuous usage when the server gave it; otherwise 1, because an engine's first
    step after prefill samples exactly one token (speculation only starts once decoding).
    """
    if rec.chunk_tokens:
        return rec.chunk_tokens[0]
    return 1


def ttft_s(rec: StreamRecord, *, from_intended: bool = False) -> float | None:
    """TTFT = (t_first - t_start) / 1e9, where t_start is the actual send, or the intended
    send with `from_intended` (wrk2's correction: lateness of the client counts as latency).
    None when the stream produced no content."""
    start = rec.t_intended_ns if from_intended else rec.t_sent_ns
    if rec.t_first_ns is None or start is None:
        return None
    return (rec.t_first_ns - start) / NS


def decode_tokens(rec: StreamRecord) -> int:
    """Tokens produced after the first content chunk: completion_tokens - first_chunk_tokens."""
    return max(rec.completion_tokens - first_chunk_tokens(rec), 0)


def decode_window_s(rec: StreamRecord) -> float | None:
    """The decode window (t_last - t_first) / 1e9; None without two distinct content chunks."""
    if rec.t_first_ns is None or rec.t_last_ns is None or rec.t_last_ns <= rec.t_first_ns:
        return None
    return (rec.t_last_ns - rec.t_first_ns) / NS


def decode_tok_s(rec: StreamRecord) -> float | None:
    """Decode-only rate = (completion_tokens - first_chunk_tokens) / (t_last - t_first).

    TTFT is split out: the window opens at the first content chunk, so prefill time never
    dilutes the rate. Tokens come from the record's token source, never a chunk count unless
    `token_source == "chunk_count"` says so.
    """
    window = decode_window_s(rec)
    if window is None:
        return None
    return decode_tokens(rec) / window


def chunks_per_s(rec: StreamRecord) -> float | None:
    """Decode-phase chunk rate = (chunks - 1) / (t_last - t_first): a step rate, not tokens."""
    window = decode_window_s(rec)
    if window is None:
        return None
    return (rec.chunks - 1) / window


def chunk_gaps_ns(rec: StreamRecord) -> list[int]:
    """Inter-chunk latency: gap_i = chunk_ns[i] - chunk_ns[i-1], one per chunk after the first."""
    ns = rec.chunk_ns
    return [b - a for a, b in pairwise(ns)]


def token_gaps_ns(rec: StreamRecord) -> list[float]:
    """Inter-token latency: chunk i's gap spread over its k_i tokens, k_i copies of gap_i / k_i.

    Without per-chunk token counts each chunk is taken as one token only when the record's
    token source is `chunk_count`; otherwise the tokens after the first chunk are spread evenly
    over the gaps (tokens per gap = decode_tokens / gaps), which keeps the mean exact.
    """
    gaps = chunk_gaps_ns(rec)
    if not gaps:
        return []
    if rec.chunk_tokens:
        out: list[float] = []
        for gap, k in zip(gaps, rec.chunk_tokens[1:], strict=False):
            if k > 0:
                out.extend([gap / k] * k)
        return out
    per_gap = decode_tokens(rec) / len(gaps)
    if per_gap <= 0:
        return []
    return [g / per_gap for g in gaps]


def chunk_token_counts(rec: StreamRecord) -> list[float]:
    """Tokens carried by each content chunk, index-aligned with `chunk_ns`.

    `chunk_tokens` where the server said; otherwise the first chunk carries first_chunk_tokens
    and the decode tokens are spread evenly over the later chunks (token_gaps_ns's convention),
    so a rate over any window of chunks stays token-true on average.
    """
    n = len(rec.chunk_ns)
    if n == 0:
        return []
    if rec.chunk_tokens and len(rec.chunk_tokens) == n:
        return [float(k) for k in rec.chunk_tokens]
    if n == 1:
        return [float(rec.completion_tokens)]
    rest = decode_tokens(rec) / (n - 1)
    return [float(first_chunk_tokens(rec))] + [rest] * (n - 1)


def tpot_s(rec: StreamRecord) -> float | None:
    """Time per output token = (t_last - t_first) / (completion_tokens - first_chunk_tokens)."""
    window = decode_window_s(rec)
    tokens = decode_tokens(rec)
    if window is None or tokens == 0:
        return None
    return window / tokens


def e2e_s(rec: StreamRecord, *, from_intended: bool = False) -> float | None:
    """End-to-end latency = (t_done - t_start) / 1e9 (intended or actual send), of a stream
    that ended ok: a failed or cut stream's t_done is when it broke, no end of an answer (an
    interrupted run's cancelled streams gave the latency table its moment of the cut)."""
    start = rec.t_intended_ns if from_intended else rec.t_sent_ns
    if rec.status != "ok" or rec.t_done_ns is None or start is None:
        return None
    return (rec.t_done_ns - start) / NS


def ttfo_s(rec: StreamRecord, *, from_intended: bool = False) -> float | None:
    """Time to first output token = (t_first_output - t_start) / 1e9: TTFT with the reasoning
    excluded (the first chunk of the answer itself). Equals TTFT for a stream that did not
    reason; None when no output chunk came (a reasoning stream cut before its answer)."""
    start = rec.t_intended_ns if from_intended else rec.t_sent_ns
    first = rec.t_first_output_ns if rec.reasoning_chunks else rec.t_first_ns
    if first is None or start is None:
        return None
    return (first - start) / NS


def reasoning_tok_s(rec: StreamRecord) -> float | None:
    """Reasoning decode rate = (reasoning_tokens - first_chunk_tokens) / (t_last_reasoning -
    t_first), when the stream opened with reasoning; None without two distinct reasoning
    chunk times or a reasoning token count."""
    if rec.reasoning_tokens is None or rec.t_last_reasoning_ns is None or rec.t_first_ns is None:
        return None
    if rec.first_output_chunk == 0 or rec.t_last_reasoning_ns <= rec.t_first_ns:
        return None
    tokens = max(rec.reasoning_tokens - first_chunk_tokens(rec), 0)
    return tokens * NS / (rec.t_last_reasoning_ns - rec.t_first_ns)


def output_tok_s(rec: StreamRecord) -> float | None:
    """Output decode rate of a reasoning stream = (completion_tokens - reasoning_tokens -
    tokens of the first output chunk) / (t_last - t_first_output): the answer's own decode,
    its first chunk split out as decode_tok_s splits out the first token. None for a stream
    that did not reason (decode_tok_s is its output rate) or without two output chunk times."""
    if not rec.reasoning_chunks or rec.reasoning_tokens is None:
        return None
    at, first, last = rec.first_output_chunk, rec.t_first_output_ns, rec.t_last_ns
    if at is None or first is None or last is None or last <= first:
        return None
    k0 = rec.chunk_tokens[at] if rec.chunk_tokens and at < len(rec.chunk_tokens) else 1
    tokens = max(rec.completion_tokens - rec.reasoning_tokens - k0, 0)
    return tokens * NS / (last - first)


def sent_ns(rec: StreamRecord) -> int:
    """The stream's send, else the instant it was meant to go."""
    return rec.t_sent_ns if rec.t_sent_ns is not None else rec.t_intended_ns


def end_ns(rec: StreamRecord) -> int:
    """The stream's last instant: its end, else its first token, else its send."""
    for t in (rec.t_done_ns, rec.t_first_ns):
        if t is not None:
            return t
    return sent_ns(rec)


def life_overlaps(rec: StreamRecord, t0: int, t1: int) -> bool:
    """Whether the stream's life, send to end, falls partly inside (t0, t1): one that ended at
    t0 or was sent at t1 is outside."""
    return sent_ns(rec) < t1 and end_ns(rec) > t0
