"""The server's own log as a witness beside the /metrics polls: vLLM's periodic engine lines
(loadgen/enginelog.py) on the run clock, each judged against what the polls allow.

A line is stamped to the second in local time, so the instant it speaks for lies in [T, T + 1)
on the run clock (run.json's run_start_wall_ns and utc_offset_s place it), and its throughput
covers the interval before that instant. Lines come on a fixed monotonic period, so where the
polls cover three lines or more the instant's place in its second (the phase) is fitted once
for the run, to the hundredth of a second that brings the lines' token counts nearest the
polls' (one parameter for all lines; a CPU vLLM's 2 s lines were 4.7% off at worst with it and
up to 40% off with the phase taken mid-second). Otherwise it stays anywhere in the second.

The polls bound the generation counter's rise over every window a line could mean: at least the
rise between the polls inside all of them, at most the rise between the polls around all of
them. A line outside those bounds (beyond the 0.05 tok/s its one decimal rounds away and 1% for
the interval's own jitter), or whose running or waiting count lies outside the polls around its
instant while those polls held steady, disagrees: the report says `!!`. A count outside polls
that moved is beyond their resolution, not judged: a closed loop's batch ends and refills
between two polls (on the H200 at 64 in flight a line said 3 running between polls of 48 and
64, while the throughput on the same line agreed).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import ClassVar

from loadgen.analysis.stats import median
from loadgen.analysis.timeline import Timeline
from loadgen.enginelog import (
    VLLM_LOG_INTERVAL_S,
    EngineLine,
    RequestTiming,
    parse_engine_lines,
    parse_request_timings,
)
from loadgen.records import StreamRecord

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
        for polls, count in ((self.metrics_running, self.running),
                             (self.metrics_waiting, self.waiting)):  # fmt: skip
            if polls is not None and (judged := _gauge_agrees(polls, count)) is not None:
                checks.append(judged)
        return all(checks) if checks else None


def _gauge_agrees(polls: Bounds, count: int) -> bool | None:
    """A gauge read at an instant between polls: inside their range agrees; outside polls that
    held steady disagrees; outside polls that moved cannot be told (None)."""
    if polls.holds(count):
        return True
    return None if polls.low != polls.high else False


@dataclass(frozen=True, slots=True)
class ServerLogWitness:
    """summary.json's run.server_log: the kept log's engine lines that fall on the polled run."""

    kind: str  # whose lines: "vllm" (the sim prints vLLM's)
    lines: int  # engine lines in the kept log
    interval_s: float
    # Where in its stamped second each line was logged, fitted over the lines (None: too few
    # lines inside the polls to fit; each line's instant is then anywhere in its second).
    phase_s: float | None
    points: tuple[LogPoint, ...]
    # llama.cpp's request timings joined to loadgen's streams, and why some could not be.
    requests: tuple[RequestCheck, ...] = ()
    requests_note: str | None = None

    @property
    def judged(self) -> list[LogPoint]:
        return [p for p in self.points if p.agrees is not None]

    @property
    def disagreeing(self) -> list[LogPoint]:
        return [p for p in self.points if p.agrees is False]


# A request's eval time and the client's decode span (first to last content chunk) agree within
# this, or this share of the eval time: both ends stamp a token's send or arrival, ms apart.
EVAL_TOL_MS = 10.0
EVAL_TOL_SHARE = 0.05


@dataclass(frozen=True, slots=True)
class RequestCheck:
    """One llama.cpp request timing beside the loadgen stream it was joined to."""

    stream: str
    task: int
    eval_tokens: int
    completion_tokens: int
    eval_ms: float
    client_decode_ms: float | None  # t_last - t_first
    prompt_ms: float
    prompt_tokens: int  # the server evaluated (its reused cache not counted)
    json_derived: ClassVar[tuple[str, ...]] = ("agrees",)

    @property
    def agrees(self) -> bool:
        if self.eval_tokens != self.completion_tokens:
            return False
        if self.client_decode_ms is None:
            return True
        tolerance = max(EVAL_TOL_MS, EVAL_TOL_SHARE * self.eval_ms)
        return abs(self.eval_ms - self.client_decode_ms) <= tolerance


def server_log_witness(
    text: str,
    records: Sequence[StreamRecord],
    timeline: Timeline,
    run_start_wall_ns: int,
    utc_offset_s: int,
) -> ServerLogWitness:
    """The kept log's witness: vLLM's engine lines beside the polls, else llama.cpp's request
    timings beside the streams (kind "none": neither was found)."""
    lines = parse_engine_lines(text)
    if lines:
        return log_witness(lines, timeline, run_start_wall_ns, utc_offset_s)
    timings = parse_request_timings(text)
    if not timings:
        return ServerLogWitness("none", 0, 0.0, None, ())
    checks, note = joined(timings, records)
    return ServerLogWitness("llama.cpp", len(timings), 0.0, None, (), checks, note)


# Requests sent this close together may reach the server in either order (of four sent within
# 0.2 ms to a loaded llama-server, the last two sent got the first two tasks).
SAME_SEND_NS = 5_000_000


def joined(
    timings: Sequence[RequestTiming], records: Sequence[StreamRecord]
) -> tuple[tuple[RequestCheck, ...], str | None]:
    """Timings in task order beside the streams that got content in order of sending: llama.cpp
    numbers its tasks as it takes requests. Among streams sent together with the same token
    counts, which took which task cannot be told, so there the timings go to the streams in
    order of duration (the pairing nearest in eval time). Where the counts differ, nothing is
    joined."""
    streams = sorted((r for r in records if r.t_first_ns is not None),
                     key=lambda r: (r.t_sent_ns or r.t_intended_ns, r.id))  # fmt: skip
    if len(streams) != len(timings):
        return (), (f"the server logged {len(timings)} request timings, loadgen has "
                    f"{len(streams)} streams with content: not joined")  # fmt: skip
    checks: list[RequestCheck] = []
    for block in _sent_together(list(zip(streams, timings, strict=True))):
        alike = len({(r.completion_tokens, t.eval_tokens) for r, t in block}) == 1
        if alike:
            by_span = sorted((r for r, _ in block), key=_span_ns)
            by_eval = sorted((t for _, t in block), key=lambda t: t.eval_ms)
            block = list(zip(by_span, by_eval, strict=True))
        checks += [_check(r, t) for r, t in block]
    return tuple(sorted(checks, key=lambda c: c.task)), None


def _sent_together(
    pairs: list[tuple[StreamRecord, RequestTiming]],
) -> list[list[tuple[StreamRecord, RequestTiming]]]:
    """Runs of pairs whose streams were each sent within SAME_SEND_NS of the one before."""
    blocks: list[list[tuple[StreamRecord, RequestTiming]]] = []
    last = None
    for r, t in pairs:
        sent = r.t_sent_ns or r.t_intended_ns
        if last is None or sent - last > SAME_SEND_NS:
            blocks.append([])
        blocks[-1].append((r, t))
        last = sent
    return blocks


def _span_ns(r: StreamRecord) -> int:
    return (r.t_last_ns or 0) - (r.t_first_ns or 0)


@dataclass(frozen=True, slots=True)
class _Instant:
    """Where a line's instant may lie on the run clock: [early, late]; `mid` is quoted."""

    early: float
    late: float

    @property
    def mid(self) -> float:
        return (self.early + self.late) / 2


PHASE_STEPS = 100  # the phase is fitted to 1/100 s
MIN_FIT_LINES = 3


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
    kept = [
        (ln, t)
        for ln, t in zip(mine, t_run, strict=True)
        if ts and ts[0] / NS - interval <= t <= ts[-1] / NS
    ]
    phase = _fitted_phase(kept, interval, timeline)
    step = 1 / PHASE_STEPS / 2
    points = tuple(
        _point(ln, _Instant(t, t + 1) if phase is None else
               _Instant(t + phase - step, t + phase + step), interval, timeline)
        for ln, t in kept
    )  # fmt: skip
    return ServerLogWitness("vllm", len(mine), interval, phase, points)


def _interval_s(t_run: list[float]) -> float:
    gaps = [b - a for a, b in pairwise(t_run) if b > a]
    typical = median(gaps)
    if typical is None:
        return VLLM_LOG_INTERVAL_S
    if typical >= SHORT_INTERVAL_S:
        return typical
    return (t_run[-1] - t_run[0]) / (len(t_run) - 1)


def _fitted_phase(
    kept: list[tuple[EngineLine, float]], interval: float, timeline: Timeline
) -> float | None:
    """The phase in [0, 1) s at which the lines' token counts are nearest the polls' rises
    (least total absolute difference); None below MIN_FIT_LINES lines inside the polls."""
    times = timeline.series(GEN)[0]
    inside = [(ln, t) for ln, t in kept if times and times[0] <= _ns(t - interval)
              and _ns(t + 1) <= times[-1]]  # fmt: skip
    if len(inside) < MIN_FIT_LINES:
        return None

    def miss(phase: float) -> float:
        total = 0.0
        for ln, t in inside:
            rise = timeline.delta(GEN, _ns(t + phase - interval), _ns(t + phase))
            total += abs(ln.gen_tok_s * interval - (rise[0] if rise else 0.0))
        return total

    return min((k / PHASE_STEPS for k in range(PHASE_STEPS)), key=miss)


def _point(line: EngineLine, at: _Instant, interval: float, timeline: Timeline) -> LogPoint:
    bounds = _rise_bounds(timeline, at, interval)
    return LogPoint(
        t_s=at.mid, gen_tok_s=line.gen_tok_s, prompt_tok_s=line.prompt_tok_s,
        running=line.running, waiting=line.waiting, kv_perc=line.kv_perc,
        prefix_hit_perc=line.prefix_hit_perc, metrics_gen_tok_s=bounds,
        metrics_gen_mid_tok_s=None if bounds is None else _mid_rate(timeline, at, interval),
        metrics_running=_gauge_bounds(timeline, RUNNING, at),
        metrics_waiting=_gauge_bounds(timeline, WAITING, at),
    )  # fmt: skip


def _rise_bounds(timeline: Timeline, at: _Instant, interval: float) -> Bounds | None:
    """The counter's rise per second over a window of `interval` ending within `at`: at least
    over the polls inside every such window, at most over the polls around all of them."""
    times, values = timeline.series(GEN)
    i = bisect.bisect_right(times, _ns(at.early - interval)) - 1
    j = bisect.bisect_left(times, _ns(at.late))
    if i < 0 or j >= len(times):
        return None
    a = bisect.bisect_left(times, _ns(at.late - interval))
    b = bisect.bisect_right(times, _ns(at.early)) - 1
    inner = values[b] - values[a] if a < b else 0.0
    return Bounds(inner / interval, (values[j] - values[i]) / interval)


def _mid_rate(timeline: Timeline, at: _Instant, interval: float) -> float | None:
    rise = timeline.delta(GEN, _ns(at.mid - interval), _ns(at.mid))
    return None if rise is None else rise[0] / interval


def _gauge_bounds(timeline: Timeline, name: str, at: _Instant) -> Bounds | None:
    """The range of the polls from the last at or before `at` to the first at or after it."""
    times, values = timeline.series(name)
    i = bisect.bisect_right(times, _ns(at.early)) - 1
    j = bisect.bisect_left(times, _ns(at.late))
    if i < 0 or j >= len(times):
        return None
    seen = values[i : j + 1]
    return Bounds(min(seen), max(seen))


def _ns(t_s: float) -> int:
    return round(t_s * NS)


def _check(r: StreamRecord, t: RequestTiming) -> RequestCheck:
    span = None
    if r.t_last_ns is not None and r.t_first_ns is not None:
        span = (r.t_last_ns - r.t_first_ns) / 1e6
    return RequestCheck(
        stream=r.id, task=t.task, eval_tokens=t.eval_tokens,
        completion_tokens=r.completion_tokens, eval_ms=t.eval_ms, client_decode_ms=span,
        prompt_ms=t.prompt_ms, prompt_tokens=t.prompt_tokens,
    )  # fmt: skip
