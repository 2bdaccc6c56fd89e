"""occupancy.prefill_ahead: the running union answers what a scan of every stream ahead would."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.analysis.occupancy import Seat, prefill_ahead


def _seat(i: int, sent: int, admit: int, first: int | None, end: int) -> Seat:
    return Seat(f"s{i}", sent, admit, first, end, i)


def test_pieces_are_clipped_to_the_streams_own_admission_and_first_token() -> None:
    seats = {
        s.id: s
        for s in (
            _seat(0, 0, 0, 10, 50),  # prefills [0, 10)
            _seat(1, 0, 5, 20, 60),  # [5, 20): touches 0's, one piece [0, 20)
            _seat(2, 0, 30, 40, 70),  # [30, 40)
            _seat(3, 0, 8, 45, 80),  # admitted at 8, first token at 45
            _seat(4, 0, 12, None, 12),  # no token, ended at admission: no prefill interval
        )
    }
    assert prefill_ahead(seats) == {
        "s0": [],
        "s1": [(5, 10)],
        "s2": [],  # admitted after everything ahead had its first token
        "s3": [(8, 20), (30, 40)],
        "s4": [],
    }


@st.composite
def _queues(draw: st.DrawFn) -> dict[str, Seat]:
    out = {}
    for i in range(draw(st.integers(1, 30))):
        sent = draw(st.integers(0, 100))
        admit = sent + draw(st.integers(0, 100))
        first = draw(st.one_of(st.none(), st.integers(admit, admit + 100)))
        end = (first if first is not None else admit) + draw(st.integers(0, 50))
        out[f"s{i}"] = _seat(i, sent, admit, first, end)
    return out


@settings(max_examples=300, deadline=None)
@given(_queues())
def test_the_union_matches_a_scan_of_every_stream_ahead(seats: dict[str, Seat]) -> None:
    got = prefill_ahead(seats)
    for s in seats.values():
        lo, hi = max(s.sent_ns, s.admit_ns), s.prefill_end_ns
        for t in range(lo - 1, hi + 1):
            scanned = any(
                o.rank < s.rank and o.admit_ns <= t < o.prefill_end_ns for o in seats.values()
            )
            inside = lo <= t < hi and any(a <= t < b for a, b in got[s.id])
            assert inside == (scanned and lo <= t < hi), (s, t, got[s.id])
        pieces = got[s.id]
        assert all(a < b for a, b in pieces)
        assert all(b < c for (_, b), (c, _) in pairwise(pieces))
