"""Which streams held a server seat when: a first-come-first-served admission model.

The client sees when a stream was sent, when its first token came and when it ended, but not
when the server admitted it. With a seat cap C (max_num_seqs), an FCFS scheduler (vLLM's
default) admits a stream at its send time if fewer than C streams ahead of it still hold a
seat, else when the earliest of them ends; never before a stream ahead of it that queued was
admitted. So, over the streams in *admission order*:

    admit_i = max(t_sent_i, admit of the last queued stream j < i,
                  earliest seat release when all C seats are held)

clamped to t_first_i (a first token proves admission, whatever the model says). Without a cap
every stream is admitted on sending. A stream's *prefill interval* is [admit, t_first): the
time it held a seat without a first token; before admit it was *queued*.

Admission order comes from evidence, not from the client's send order alone. A server takes
requests sent in the same instant in any order (llama-server's HTTP threads race for its
slots), so streams sent within TIE_WINDOW_NS of the first send of their *tie group* (the
streams are grouped in send order, each group opened by the first stream sent more than the
window after the previous group's opening send) are unordered by sending. Within a group the
seats go in order of the latest admission each stream's first token allows with its normal
prefill time: t_first - prefill_s (verdicts.py passes limits.expected_prefill_s; without one,
t_first). The stream served first was admitted first; subtracting its own prefill keeps a whale
that was seated at once (its first token late only because its prompt is long) ahead of a
minnow that queued for the seat it held. Streams without a first token come last in their
group. Ties, and streams in different groups, keep FCFS order: by send time, then id.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Mapping
from dataclasses import dataclass

from loadgen.analysis.maxtree import ABSENT, MaxTree, Spans
from loadgen.analysis.rates import NS
from loadgen.records import StreamRecord

# Sends closer than this to their tie group's first send are taken as simultaneous.
TIE_WINDOW_NS = 5_000_000


@dataclass(frozen=True, slots=True)
class Seat:
    """One stream's modelled occupancy, run-clock ns; `rank` is its place in admission order."""

    id: str
    sent_ns: int
    admit_ns: int
    first_ns: int | None
    end_ns: int
    rank: int

    @property
    def prefill_end_ns(self) -> int:
        """End of the prefill interval: the first token, or the end for a tokenless stream."""
        return self.first_ns if self.first_ns is not None else self.end_ns


def end_ns(rec: StreamRecord) -> int | None:
    """When the stream released its seat: done, else its last sign of life."""
    for t in (rec.t_done_ns, rec.t_last_ns, rec.t_first_ns, rec.t_sent_ns):
        if t is not None:
            return t
    return None


def admission_order(
    records: list[StreamRecord], prefill_s: Mapping[str, float | None] | None = None
) -> list[StreamRecord]:
    """Sent streams in modelled admission order (module docstring)."""
    sent = sorted((r for r in records if r.t_sent_ns is not None), key=_send_key)
    groups: list[list[StreamRecord]] = []
    for r in sent:
        if groups and _sent(r) - _sent(groups[-1][0]) <= TIE_WINDOW_NS:
            groups[-1].append(r)
        else:
            groups.append([r])
    prefill = prefill_s or {}
    return [r for g in groups for r in sorted(g, key=lambda r: _served_key(r, prefill))]


def _sent(r: StreamRecord) -> int:
    assert r.t_sent_ns is not None
    return r.t_sent_ns


def _send_key(r: StreamRecord) -> tuple[int, str]:
    return _sent(r), r.id


def _served_key(
    r: StreamRecord, prefill_s: Mapping[str, float | None]
) -> tuple[bool, int, int, str]:
    """Order within a tie group: the latest admission its first token allows, first."""
    if r.t_first_ns is None:
        return True, 0, *_send_key(r)
    latest = r.t_first_ns - round((prefill_s.get(r.id) or 0.0) * NS)
    return False, latest, *_send_key(r)


def seats(
    records: list[StreamRecord],
    cap: int | None,
    prefill_s: Mapping[str, float | None] | None = None,
) -> dict[str, Seat]:
    """Each sent stream's modelled admission under an FCFS cap (module docstring); `prefill_s`
    is each stream's normal prefill time by id, for the order within a tie group."""
    held: list[int] = []  # end times of streams holding a seat
    queue_front = 0  # admission of the last stream that queued: none behind it goes sooner
    out: dict[str, Seat] = {}
    for rank, r in enumerate(admission_order(records, prefill_s)):
        sent = _sent(r)
        while held and held[0] <= sent:
            heapq.heappop(held)
        admit = sent
        while cap is not None and len(held) >= cap:
            admit = heapq.heappop(held)
        admit = max(admit, queue_front, sent)
        if r.t_first_ns is not None:
            admit = min(admit, r.t_first_ns)
        if admit > sent:
            queue_front = admit
        end = max(end_ns(r) or sent, admit)
        heapq.heappush(held, end)
        out[r.id] = Seat(r.id, sent, admit, r.t_first_ns, end, rank)
    return out


def prefill_ahead(modelled: dict[str, Seat]) -> dict[str, list[tuple[int, int]]]:
    """Per stream, when some stream ahead of it in admission order was prefilling, clipped to
    its own [admission, first token) (before its admission the seat cap holds it, whoever
    prefills): disjoint [from_ns, to_ns) pieces in time order.

    One pass in admission order over a running union of prefill intervals: a stream's wait is
    judged against everything ahead of it, so a late stream of a long FCFS queue costs a few
    bisections, not a scan of the whole queue (10,000 streams sent together took 410 s of
    verdicts that way)."""
    starts: list[int] = []  # the union so far: disjoint, sorted, touching pieces merged
    ends: list[int] = []
    out: dict[str, list[tuple[int, int]]] = {}
    for s in sorted(modelled.values(), key=lambda s: s.rank):
        lo, hi = max(s.sent_ns, s.admit_ns), s.prefill_end_ns
        i = bisect.bisect_right(ends, lo)
        mine = []
        while lo < hi and i < len(starts) and starts[i] < hi:
            mine.append((max(starts[i], lo), min(ends[i], hi)))
            i += 1
        out[s.id] = mine
        a, b = s.admit_ns, s.prefill_end_ns
        if a < b:
            first, last = bisect.bisect_left(ends, a), bisect.bisect_right(starts, b)
            if first < last:
                a, b = min(a, starts[first]), max(b, ends[last - 1])
            starts[first:last], ends[first:last] = [a], [b]
    return out


class Prefills:
    """The streams' non-empty prefill intervals [admit, prefill end), indexed for the questions
    the verdicts ask of every stream: when some stream was prefilling within a window (the
    union's pieces) and the first few by id of those, and the first few by id of those ahead of
    a stream in admission order."""

    def __init__(self, modelled: dict[str, Seat]) -> None:
        held = [s for s in modelled.values() if s.admit_ns < s.prefill_end_ns]
        by_admit = sorted(held, key=lambda s: (s.admit_ns, s.id))
        # The union of every prefill, touching intervals merged: disjoint, in time order.
        self._union_starts: list[int] = []
        self._union_ends: list[int] = []
        for s in by_admit:
            if self._union_ends and s.admit_ns <= self._union_ends[-1]:
                self._union_ends[-1] = max(self._union_ends[-1], s.prefill_end_ns)
            else:
                self._union_starts.append(s.admit_ns)
                self._union_ends.append(s.prefill_end_ns)
        self._by_id = sorted(held, key=lambda s: s.id)
        self._id_spans = Spans([(s.admit_ns, s.prefill_end_ns) for s in self._by_id])
        place = {s.id: i for i, s in enumerate(self._by_id)}
        self._by_rank = [(s, place[s.id]) for s in sorted(held, key=lambda s: s.rank)]
        # Prefill ends by id order of the streams ranked below `_ahead`, the others ABSENT.
        self._ahead_ends = MaxTree([ABSENT] * len(held))
        self._ahead = 0

    def stretches(self, t0: int, t1: int) -> list[tuple[int, int]]:
        """When some stream was prefilling within (t0, t1): the union's pieces that reach into
        it, clipped to it, in time order. The same as merging just the prefills that overlap
        the window: one that does not lies wholly outside it, so it cannot join two pieces
        inside. A stream's own prefill ends at its first token, so it never overlaps its own
        decode window (t_first, t_last)."""
        out = []
        i = bisect.bisect_right(self._union_ends, t0)
        while i < len(self._union_starts) and self._union_starts[i] < t1:
            out.append((max(self._union_starts[i], t0), min(self._union_ends[i], t1)))
            i += 1
        return out

    def first_during(self, t0: int, t1: int, limit: int) -> list[str]:
        """Up to `limit` ids, in id order, of streams prefilling at some instant of (t0, t1):
        admitted before t1, prefill ending after t0. Found in id order and stopped at the
        limit, so a window that thousands of prefills overlap costs a few, not thousands."""
        found = self._id_spans.overlapping(t0, t1)
        return [self._by_id[i].id for i in itertools.islice(found, limit)]

    def first_ahead(self, rank: int, t0: int, t1: int, limit: int) -> list[str]:
        """Up to `limit` ids, in id order, of streams ranked before `rank` whose prefill
        overlaps (t0, t1). Asked in rank order (as the verdicts do), each stream enters the
        index once; asked out of order it is still exact, the index moving back."""
        while self._ahead < len(self._by_rank) and self._by_rank[self._ahead][0].rank < rank:
            seat, i = self._by_rank[self._ahead]
            self._ahead_ends.set(i, seat.prefill_end_ns)
            self._ahead += 1
        while self._ahead > 0 and self._by_rank[self._ahead - 1][0].rank >= rank:
            self._ahead -= 1
            self._ahead_ends.set(self._by_rank[self._ahead][1], ABSENT)
        found = (
            self._by_id[i]
            for i in self._ahead_ends.where(0, len(self._by_id), lambda end: end > t0)
        )
        return [s.id for s in itertools.islice((s for s in found if s.admit_ns < t1), limit)]
