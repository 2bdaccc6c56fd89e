"""Which streams held a server seat when: a first-come-first-served admission model.

The client sees when a stream was sent, when its first token came and when it ended, but not
when the server admitted it. With a seat cap C (max_num_seqs), an FCFS scheduler (vLLM's
default) admits a stream at its send time if fewer than C earlier streams still hold a seat,
else when the earliest of them ends; never before an earlier arrival was admitted. So:

    admit_i = max(t_sent_i, admit_{i-1}, earliest seat release when all C seats are held)

clamped to t_first_i (a first token proves admission, whatever the model says). Without a cap
every stream is admitted on sending. A stream's *prefill interval* is [admit, t_first): the
time it held a seat without a first token; before admit it was *queued*.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from loadgen.records import StreamRecord


@dataclass(frozen=True, slots=True)
class Seat:
    """One stream's modelled occupancy, run-clock ns."""

    id: str
    sent_ns: int
    admit_ns: int
    first_ns: int | None
    end_ns: int

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


def arrival_order(records: list[StreamRecord]) -> list[StreamRecord]:
    """Sent streams in FCFS order: by send time, ties by id."""
    sent = [r for r in records if r.t_sent_ns is not None]
    return sorted(sent, key=lambda r: (r.t_sent_ns, r.id))


def seats(records: list[StreamRecord], cap: int | None) -> dict[str, Seat]:
    """Each sent stream's modelled admission under an FCFS cap (module docstring)."""
    held: list[int] = []  # end times of streams holding a seat
    last_admit = 0
    out: dict[str, Seat] = {}
    for r in arrival_order(records):
        sent = r.t_sent_ns
        assert sent is not None
        while held and held[0] <= sent:
            heapq.heappop(held)
        admit = sent
        while cap is not None and len(held) >= cap:
            admit = heapq.heappop(held)
        admit = max(admit, last_admit, sent)
        if r.t_first_ns is not None:
            admit = min(admit, r.t_first_ns)
        last_admit = admit
        end = max(end_ns(r) or sent, admit)
        heapq.heappush(held, end)
        out[r.id] = Seat(r.id, sent, admit, r.t_first_ns, end)
    return out


def in_prefill(seat: Seat, t_ns: float) -> bool:
    """True while the stream held a seat without its first token."""
    return seat.admit_ns <= t_ns < seat.prefill_end_ns


def overlap_ns(a0: int, a1: int, b0: int, b1: int) -> int:
    """Length of the intersection of [a0, a1) and [b0, b1)."""
    return max(0, min(a1, b1) - max(a0, b0))
