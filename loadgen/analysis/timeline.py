"""The server metrics timeline (metrics.jsonl) as queryable series on the run clock.

Gauges (running, waiting, kv) are read at sample times; counters are read at arbitrary times by
linear interpolation between the two samples that bracket the time ("interpolated"), or from the
nearest sample when the time lies outside the polled range ("nearest"): every counter delta says
which. Failed scrapes (error set) are ignored; an empty timeline answers None everywhere.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from itertools import pairwise
from typing import NamedTuple

from loadgen.analysis.stats import median
from loadgen.records import MetricsSample

NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Reading:
    """A series value at a time, and how it was obtained."""

    value: float
    method: str  # "exact" | "interpolated" | "nearest"


@dataclass(frozen=True, slots=True)
class Plateau:
    """The longest contiguous run of polls holding one value, in s from run start as
    summary.json has it (its duration from the ns span, not from_s - to_s rounded twice)."""

    value: float
    from_s: float
    to_s: float
    duration_s: float
    samples: int

    @classmethod
    def of_polls(cls, value: float, from_ns: int, to_ns: int, samples: int) -> Plateau:
        return cls(value, from_ns / NS, to_ns / NS, (to_ns - from_ns) / NS, samples)


class _Series(NamedTuple):
    """One metric's polls: when each was answered, its value, and when it was asked for (its
    answer's time where the scrape recorded none)."""

    times: list[int]
    values: list[float]
    asked: list[int]


# A window's ends may lie this many poll intervals, or this share of the window, past the polls
# before Timeline.polled_part says the polls fall short of it.
GAP_POLLS = 3
GAP_SHARE = 0.05


class Timeline:
    """Successful scrapes sorted by time, with per-metric series."""

    def __init__(self, samples: list[MetricsSample]) -> None:
        self.samples = sorted((s for s in samples if s.error is None), key=lambda s: s.t_ns)
        self._ts = [s.t_ns for s in self.samples]
        self._series: dict[str, _Series] = {}
        # The whole run's median poll gap, once: polled_part is asked for every window.
        self._typical_gap_ns = median([b - a for a, b in pairwise(self._ts)]) or 0

    @property
    def available(self) -> bool:
        return bool(self.samples)

    def series(self, name: str) -> tuple[list[int], list[float]]:
        """(times, values) of the samples that exported `name`."""
        found = self._polls(name)
        return found.times, found.values

    def _polls(self, name: str) -> _Series:
        if name not in self._series:
            polls = [s for s in self.samples if name in s.values]
            self._series[name] = _Series(
                [s.t_ns for s in polls],
                [float(s.values[name]) for s in polls],
                [s.t_ns if s.t_asked_ns is None else s.t_asked_ns for s in polls],
            )
        return self._series[name]

    def has(self, name: str) -> bool:
        return bool(self.series(name)[0])

    def value_at(self, name: str, t_ns: int) -> Reading | None:
        """The series at t_ns: exact on a sample, interpolated between two, else nearest."""
        ts, vs = self.series(name)
        if not ts:
            return None
        i = bisect.bisect_left(ts, t_ns)
        if i < len(ts) and ts[i] == t_ns:
            return Reading(vs[i], "exact")
        if i == 0:
            return Reading(vs[0], "nearest")
        if i == len(ts):
            return Reading(vs[-1], "nearest")
        t0, t1, v0, v1 = ts[i - 1], ts[i], vs[i - 1], vs[i]
        return Reading(v0 + (v1 - v0) * (t_ns - t0) / (t1 - t0), "interpolated")

    def delta(self, name: str, t0_ns: int, t1_ns: int) -> tuple[float, str, str] | None:
        """Counter increase over [t0, t1] and how each edge was read (counters are assumed not
        to reset inside one run: one run is one server boot)."""
        a, b = self.value_at(name, t0_ns), self.value_at(name, t1_ns)
        if a is None or b is None:
            return None
        return b.value - a.value, a.method, b.method

    def outer_delta(self, name: str, t0_ns: int, t1_ns: int) -> tuple[float, int, int] | None:
        """Counter increase between the last poll answered at or before t0 and the first asked
        at or after t1 (the nearest polls inside when the window overhangs the polled range):
        whole events for discrete counters, over a window at least as wide as [t0, t1]. A poll
        asked before t1 and answered after it may hold the values from before t1: on vLLM's
        CPU build one of four replayed streams' cache hits fell outside its window that way."""
        ts, vs, asked = self._polls(name)
        if not ts:
            return None
        i = max(bisect.bisect_right(ts, t0_ns) - 1, 0)
        j = min(bisect.bisect_left(asked, t1_ns), len(ts) - 1)
        if j < i:
            return None
        return vs[j] - vs[i], ts[i], ts[j]

    def span_between(self, t0_ns: int, t1_ns: int) -> tuple[int, int]:
        """[from, to) indices of the samples with t0 <= t_ns <= t1."""
        return bisect.bisect_left(self._ts, t0_ns), bisect.bisect_right(self._ts, t1_ns)

    def times_between(self, t0_ns: int, t1_ns: int) -> list[int]:
        """Poll times t0 <= t <= t1."""
        return self._ts[bisect.bisect_left(self._ts, t0_ns) : bisect.bisect_right(self._ts, t1_ns)]

    def max_between(self, name: str, t0_ns: int, t1_ns: int) -> tuple[float, int] | None:
        """(peak value, its time) over the polls inside [t0, t1]."""
        ts, vs = self.series(name)
        pts = [(v, t) for t, v in zip(ts, vs, strict=True) if t0_ns <= t <= t1_ns]
        if not pts:
            return None
        peak = max(v for v, _ in pts)
        return peak, min(t for v, t in pts if v == peak)

    def bracket(self, t_ns: int) -> list[MetricsSample]:
        """The last sample at or before t_ns and the first after it (one near the edges)."""
        i = bisect.bisect_right(self._ts, t_ns)
        return self.samples[max(i - 1, 0) : i + 1]

    def plateau(self, name: str, t0_ns: int, t1_ns: int) -> Plateau | None:
        """Longest-held nonzero value over >= 2 consecutive polls in [t0, t1] (ties: more polls,
        then the higher value)."""
        ts, vs = self.series(name)
        pts = [(t, v) for t, v in zip(ts, vs, strict=True) if t0_ns <= t <= t1_ns]
        best: Plateau | None = None
        i = 0
        while i < len(pts):
            j = i
            while j + 1 < len(pts) and pts[j + 1][1] == pts[i][1]:
                j += 1
            run = Plateau.of_polls(pts[i][1], pts[i][0], pts[j][0], j - i + 1)
            if run.value > 0 and run.samples >= 2 and _longer(run, best):
                best = run
            i = j + 1
        return best

    def polled_part(self, t0_ns: int, t1_ns: int) -> tuple[int, int] | None:
        """The part of [t0, t1] between the first and the last poll, where the polls leave
        more than GAP_POLLS poll intervals (or GAP_SHARE of the window) unpolled at an end: a
        metrics.jsonl cut short, or a /metrics that stopped answering. None where they cover
        the window (the part may be empty, lo > hi, where no poll is near it)."""
        if not self._ts:
            return (t1_ns, t0_ns)
        allowance = max(GAP_POLLS * self._typical_gap_ns, GAP_SHARE * (t1_ns - t0_ns))
        first, last = self._ts[0], self._ts[-1]
        if first <= t0_ns + allowance and last >= t1_ns - allowance:
            return None
        return max(first, t0_ns), min(last, t1_ns)

    def poll_interval_s(self, t0_ns: int, t1_ns: int) -> float | None:
        """Median time between the successful polls inside [t0, t1] at distinct instants (None
        with fewer than two): the run's polls all told counted the scrapes at its edges, a
        burst of them, and gave a 4-stream run "one every 0.007 s" where it polled every 0.05
        s."""
        # Scrapes at one instant (a virtual run's rep edges) are no interval: a run shorter
        # than one poll read "4 polls, one every 0.000 s".
        gaps = [b - a for a, b in pairwise(self.times_between(t0_ns, t1_ns)) if b > a]
        typical = median(gaps)
        return None if typical is None else typical / NS


def _longer(run: Plateau, best: Plateau | None) -> bool:
    if best is None:
        return True
    # Distinct ns spans stay distinct in s: below 2**53 ns (104 days) division is exact enough.
    key = (run.duration_s, run.samples, run.value)
    return key > (best.duration_s, best.samples, best.value)
