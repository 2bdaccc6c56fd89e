"""The server's own log as a witness beside the /metrics polls: vLLM's periodic engine lines
(loadgen/enginelog.py) on the run clock, each judged against what the polls allow.

A line is stamped to the second in local time, so the instant it speaks for lies in [T, T + 1)
on the run clock (run.json's run_start_wall_ns and utc_offset_s place it), and its throughput
covers the interval before that instant. The polls bound the generation counter's rise over
every window the line could mean: at least the rise between the polls inside all of them, at
most the rise between the polls outside all of them. A line outside those bounds (beyond the
0.05 tok/s its one decimal rounds away and 1% for the interval's own jitter), or whose running
or waiting count lies outside the polls around its second, disagrees: the report says `!!`.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import ClassVar

from loadgen.analysis.stats import median
from loadgen.analysis.timeline import Timeline
from loadgen.enginelog import VLLM_LOG_INTERVAL_S, EngineLine

NS = 1_000_000_000
GEN = "generation_tokens_total"
RUNNING, WAITING = "num_requests_running", "num_requests_waiting"
ROUNDING_TOK_S = 0.05  # the line prints %.1f
INTERVAL_JITTER = 0.01  # vLLM sleeps the interval, then logs: 10.0x s, not 10
# Below this a typical gap between stamps says little (stamps move by whole seconds): the
# interval is taken as the mean gap over the lines instead.
SHORT_INTERVAL_S = 5.0


@dataclass(frozen=True, slots=True)
class Bounds:
    low: float
    high: float

    def holds(self, value: float, slack: float = 0.0) -> bool:
        return self.low - slack <= value <= self.high + slack

    def off_by(self, value: float) -> float:
        """How far `value` lies outside, relative to the nearer bound (0 inside)."""
        if value < self.low:
            return (self.low - value) / self.low if self.low else float("inf")
        if value > self.high:
            return (value - self.high) / self.high if self.high else float("inf")
        return 0.0


@dataclass(frozen=True, slots=True)
class LogPoint:
    """One engine line on the run clock (`t_s`: the start of its second), beside what the polls
    allow for the same instant and interval (None: the interval overhangs the polls)."""

    t_s: float
    gen_tok_s: float
    prompt_tok_s: float
    running: int
    waiting: int
    kv_perc: float
    prefix_hit_perc: float | None
    metrics_gen_tok_s: Bounds | None
    # The polls' rise over the interval ending mid-second, interpolated: the figure to quote.
    metrics_gen_mid_tok_s: float | None
    metrics_running: Bounds | None
    metrics_waiting: Bounds | None
    json_derived: ClassVar[tuple[str, ...]] = ("agrees",)

    @property
    def agrees(self) -> bool | None:
        """None: nothing to judge against."""
        checks = []
        if self.metrics_gen_tok_s is not None:
            slack = ROUNDING_TOK_S + INTERVAL_JITTER * self.metrics_gen_tok_s.high
            checks.append(self.metrics_gen_tok_s.holds(self.gen_tok_s, slack))
        if self.metrics_running is not None:
            checks.append(self.metrics_running.holds(self.running))
        if self.metrics_waiting is not None:
            checks.append(self.metrics_waiting.holds(self.waiting))
        return all(checks) if checks else None


@dataclass(frozen=True, slots=True)
class ServerLogWitness:
    """summary.json's run.server_log: the kept log's engine lines that fall on the polled run."""

    kind: str  # whose lines: "vllm" (the sim prints vLLM's)
    lines: int  # engine lines in the kept log
    interval_s: float
    points: tuple[LogPoint, ...]

    @property
    def judged(self) -> list[LogPoint]:
        return [p for p in self.points if p.agrees is not None]

    @property
    def disagreeing(self) -> list[LogPoint]:
        return [p for p in self.points if p.agrees is False]


def log_witness(
    lines: Sequence[EngineLine],
    timeline: Timeline,
    run_start_wall_ns: int,
    utc_offset_s: int,
) -> ServerLogWitness:
    """The lines of engine 0 that fall on the polled span, each beside the polls."""
    start_s = run_start_wall_ns / NS
    ts = timeline.series(GEN)[0]
    mine = [ln for ln in lines if ln.engine == 0]
    t_run = [ln.epoch_s(start_s, utc_offset_s) - start_s for ln in mine]
    interval = _interval_s(t_run)
    points = tuple(
        _point(ln, t, interval, timeline)
        for ln, t in zip(mine, t_run, strict=True)
        if ts and ts[0] / NS - interval <= t <= ts[-1] / NS
    )
    return ServerLogWitness("vllm", len(mine), interval, points)


def _interval_s(t_run: list[float]) -> float:
    gaps = [b - a for a, b in pairwise(t_run) if b > a]
    typical = median(gaps)
    if typical is None:
        return VLLM_LOG_INTERVAL_S
    if typical >= SHORT_INTERVAL_S:
        return typical
    return (t_run[-1] - t_run[0]) / (len(t_run) - 1)


def _point(line: EngineLine, t: float, interval: float, timeline: Timeline) -> LogPoint:
    bounds = _rise_bounds(timeline, t, interval)
    return LogPoint(
        t_s=t, gen_tok_s=line.gen_tok_s, prompt_tok_s=line.prompt_tok_s, running=line.running,
        waiting=line.waiting, kv_perc=line.kv_perc, prefix_hit_perc=line.prefix_hit_perc,
        metrics_gen_tok_s=bounds,
        metrics_gen_mid_tok_s=None if bounds is None else _mid_rate(timeline, t, interval),
        metrics_running=_gauge_bounds(timeline, RUNNING, t),
        metrics_waiting=_gauge_bounds(timeline, WAITING, t),
    )  # fmt: skip


def _rise_bounds(timeline: Timeline, t: float, interval: float) -> Bounds | None:
    """The counter's rise per second over a window of `interval` ending in [t, t + 1): at least
    over the polls inside every such window, at most over the polls around all of them."""
    times, values = timeline.series(GEN)
    lo_edge, hi_edge = _ns(t + 1 - interval), _ns(t)  # inside every window
    outer_lo, outer_hi = _ns(t - interval), _ns(t + 1)  # around all of them
    i = bisect.bisect_right(times, outer_lo) - 1
    j = bisect.bisect_left(times, outer_hi)
    if i < 0 or j >= len(times):
        return None
    a = bisect.bisect_left(times, lo_edge)
    b = bisect.bisect_right(times, hi_edge) - 1
    inner = values[b] - values[a] if a < b else 0.0
    return Bounds(inner / interval, (values[j] - values[i]) / interval)


def _mid_rate(timeline: Timeline, t: float, interval: float) -> float | None:
    rise = timeline.delta(GEN, _ns(t + 0.5 - interval), _ns(t + 0.5))
    return None if rise is None else rise[0] / interval


def _gauge_bounds(timeline: Timeline, name: str, t: float) -> Bounds | None:
    """The range of the polls from the last at or before t to the first at or after t + 1."""
    times, values = timeline.series(name)
    i = bisect.bisect_right(times, _ns(t)) - 1
    j = bisect.bisect_left(times, _ns(t + 1))
    if i < 0 or j >= len(times):
        return None
    seen = values[i : j + 1]
    return Bounds(min(seen), max(seen))


def _ns(t_s: float) -> int:
    return round(t_s * NS)
