"""Per-stream quantities (from rates.py's definitions) and decode rates over sub-windows.

A window rate counts the tokens of the chunks that *arrived* inside the window (token counts per
chunk from rates.chunk_token_counts, so multi-token chunks count all their tokens) and divides by
the window's length: every WindowRate names its window and token source. A window may have holes
(excluded time, e.g. other streams' prefills): its rate is over the time left.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, ClassVar

from loadgen.analysis import rates
from loadgen.analysis.registry import GAP_METRICS, STREAM_METRICS
from loadgen.analysis.stats import tail
from loadgen.codec import json_field, to_json
from loadgen.records import StreamRecord

NS = rates.NS
MS = 1_000_000


@dataclass(frozen=True, slots=True)
class WindowRate:
    """Tokens and chunks that arrived in (from_ns, to_ns] outside its holes, over the length of
    the window minus the holes (excluded_ns)."""

    from_ns: int = json_field(omit="always")
    to_ns: int = json_field(omit="always")
    tokens: float = json_field()
    chunks: int = json_field()
    token_source: str = json_field()
    excluded_ns: int = json_field(default=0, omit="always")
    # summary.json's window: in seconds, with its rates (the ns fields are the arithmetic's).
    json_derived: ClassVar[tuple[str, ...]] = (
        "from_s", "to_s", "tok_s", "chunks_per_s", "excluded_s"
    )  # fmt: skip

    @property
    def tok_s(self) -> float:
        return self.tokens * NS / (self.to_ns - self.from_ns - self.excluded_ns)

    @property
    def chunks_per_s(self) -> float:
        return self.chunks * NS / (self.to_ns - self.from_ns - self.excluded_ns)

    @property
    def from_s(self) -> float:
        return self.from_ns / NS

    @property
    def to_s(self) -> float:
        return self.to_ns / NS

    @property
    def excluded_s(self) -> float:
        return self.excluded_ns / NS


def window_rate(rec: StreamRecord, from_ns: int, to_ns: int) -> WindowRate | None:
    """Decode rate of the chunks arriving in (from_ns, to_ns]; None for an empty window."""
    return StreamWindows(rec).rate(from_ns, to_ns)


class StreamWindows:
    """One stream's window rates asked many times (a verdict asks one per stretch of others'
    prefills, hundreds in a crowded run): a window's chunks found by bisection, its tokens
    summed in arrival order. Chunks recorded out of order (an imported record) are scanned."""

    def __init__(self, rec: StreamRecord) -> None:
        self._rec = rec
        self._tokens = rates.chunk_token_counts(rec)
        ns = rec.chunk_ns
        self._ordered = all(a <= b for a, b in pairwise(ns))

    def _sums(self, from_ns: int, to_ns: int) -> tuple[float, int]:
        """Tokens and chunks arriving in (from_ns, to_ns]."""
        ns = self._rec.chunk_ns
        if self._ordered:
            lo, hi = bisect.bisect_right(ns, from_ns), bisect.bisect_right(ns, to_ns)
            return sum(self._tokens[lo:hi], 0.0), hi - lo
        inside = [k for t, k in zip(ns, self._tokens, strict=True) if from_ns < t <= to_ns]
        return sum(inside, 0.0), len(inside)

    def rate(self, from_ns: int, to_ns: int) -> WindowRate | None:
        """Decode rate of the chunks arriving in (from_ns, to_ns]; None for an empty window."""
        if to_ns <= from_ns:
            return None
        return WindowRate(from_ns, to_ns, *self._sums(from_ns, to_ns), self._rec.token_source)

    def rates_from_each(self, pieces: list[tuple[int, int]]) -> list[WindowRate | None]:
        """For each i, the decode rate of the chunks arriving in the union of the disjoint,
        time-ordered windows (a, b] of pieces[i:], over their summed length (None when they
        hold no time). A piece without chunks adds 0.0 to the tokens, which changes no sum, so
        only pieces with chunks are summed: the cost is pieces x chunks, not pieces squared."""
        held = [j for j, (a, b) in enumerate(pieces) if b > a]
        sums = [self._sums(*pieces[j]) for j in held]
        with_chunks = [k for k, (_, n) in enumerate(sums) if n]
        tokens = [sums[k][0] for k in with_chunks]
        out: list[WindowRate | None] = []
        length = chunks = 0
        tails: list[tuple[int, int]] = []  # per held piece from the last: summed length, chunks
        for k in range(len(held) - 1, -1, -1):
            a, b = pieces[held[k]]
            length, chunks = length + b - a, chunks + sums[k][1]
            tails.append((length, chunks))
        tails.reverse()
        for i in range(len(pieces)):
            k = bisect.bisect_left(held, i)
            if k == len(held):
                out.append(None)
                continue
            first, last = pieces[held[k]][0], pieces[held[-1]][1]
            length, chunks = tails[k]
            summed = sum(tokens[bisect.bisect_left(with_chunks, k) :], 0.0)
            out.append(WindowRate(first, last, summed, chunks, self._rec.token_source,
                                  excluded_ns=last - first - length))  # fmt: skip
        return out


def rate_after(rec: StreamRecord, split_ns: int) -> WindowRate | None:
    """Steady decode rate after split_ns: from the first chunk arriving at or after split_ns to
    the last chunk (that first chunk's own tokens excluded, as decode_tok_s excludes the first
    token); None without two chunks after the split."""
    after = [t for t in rec.chunk_ns if t >= split_ns]
    if len(after) < 2:
        return None
    return window_rate(rec, after[0], after[-1])


def stream_metrics(rec: StreamRecord) -> dict[str, Any]:
    """Every per-stream quantity of one record (no verdict): who it is, how it ended, each
    registered metric and the statistics of its gaps; times in s from run start."""
    row: dict[str, Any] = {
        "id": rec.id,
        "group": rec.group,
        "rep": rec.rep,
        "phase": rec.phase,
        "arm": rec.arm,
        "session": rec.session,
        "turn": rec.turn,
        "status": rec.status,
        "error": None if rec.error is None else to_json(rec.error),
        "http_status": rec.http_status,
        "token_source": rec.token_source,
        # The server does not report a per-request queue time in the record contract.
        "queue_wait_s": None,
        "reasoning_chunks": rec.reasoning_chunks,
        "reasoning_tokens": rec.reasoning_tokens,
        "reasoning_token_source": rec.reasoning_token_source,
        "t_intended_s": rec.t_intended_ns / NS,
        "t_sent_s": _s(rec.t_sent_ns),
        "t_first_s": _s(rec.t_first_ns),
        "t_last_s": _s(rec.t_last_ns),
        "t_done_s": _s(rec.t_done_ns),
    }
    row |= {m.name: m.of(rec) for m in STREAM_METRICS}
    row |= {g.name: tail([t / MS for t in g.gaps_ns(rec)]) for g in GAP_METRICS}
    return row


def _s(t_ns: int | None) -> float | None:
    return None if t_ns is None else t_ns / NS


def chunk_token_tally(records: list[StreamRecord]) -> dict[str, int]:
    """Content chunks, those that carried more than one token, and their tokens, over the
    records whose server said how many tokens each chunk carried (continuous usage); the
    rest cannot tell a 2-token chunk from two 1-token ones, so they are left out."""
    per_chunk = [k for r in records if r.chunk_tokens is not None for k in r.chunk_tokens]
    return {"chunks": len(per_chunk), "multi": sum(k > 1 for k in per_chunk),
            "tokens": sum(per_chunk)}  # fmt: skip
