"""HdrHistograms of TTFT, inter-token latency and end-to-end latency, as mergeable .hlog files.

One file per (group, metric) under hist/, written with hdrh's HistogramLogWriter: one interval
histogram per rep, stamped with the rep's span on the run clock (seconds since run start).
Values are integer microseconds in [HIST_LOWEST_US, HIST_HIGHEST_US] at HIST_DIGITS significant
digits. `*_corrected` latencies start at the intended send time (wrk2's coordinated-omission
correction: the client's own lateness counts), `*_uncorrected` at the actual send. `itl_token`
is the per-token gap (multi-token chunks spread), `itl_chunk` the raw gap between chunks. A
value outside the range is never silently lost: record_value's False is counted per histogram.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader, HistogramLogWriter

from loadgen.analysis import registry
from loadgen.analysis.aggregate import span_ns
from loadgen.analysis.registry import histogram_sources
from loadgen.records import StreamRecord

HIST_LOWEST_US = 1
HIST_HIGHEST_US = 3_600_000_000  # one hour
HIST_DIGITS = 3
# metric -> a record's values in us, from the metric registry.
HIST_METRICS: dict[str, Callable[[StreamRecord], list[float]]] = histogram_sources()
# `--metric-percentiles`' figures (vllm bench serve's names) -> the hist/ metric each is read
# from: TTFT and E2E from the actual send, as vllm bench times them; ITL per token. TPOT has no
# log of its own, so its histogram is built alike from the same streams, never written.
PERCENTILE_HISTS = {
    "ttft_ms": "ttft_uncorrected",
    "tpot_ms": None,
    "itl_ms": "itl_token",
    "e2e_ms": "e2e_uncorrected",
}
US_PER_MS = 1e3


def new_histogram() -> HdrHistogram:
    return HdrHistogram(HIST_LOWEST_US, HIST_HIGHEST_US, HIST_DIGITS)


def record_all(h: HdrHistogram, values_us: list[float]) -> int:
    """Records each round(value) inside the declared range; returns how many were not recorded.

    The declared range is checked here too: hdrh's bucket array reaches past the highest
    trackable value (to the next bucket boundary), so record_value alone accepts some values
    above it. Equal values are recorded once with their count (hdrh is pure Python).
    """
    if not values_us:
        return 0
    rounded = np.rint(np.asarray(values_us, dtype=float)).astype(np.int64)
    inside = rounded[(rounded >= 0) & (rounded <= HIST_HIGHEST_US)]
    missed = len(rounded) - len(inside)
    values, counts = np.unique(inside, return_counts=True)
    for v, c in zip(values.tolist(), counts.tolist(), strict=True):
        if not h.record_value(v, c):
            missed += c
    return missed


@dataclass
class GroupHistograms:
    """One group's histograms: metric -> rep -> interval histogram, plus what did not fit."""

    group: str
    by_metric: dict[str, dict[int, HdrHistogram]] = field(default_factory=dict)
    spans: dict[int, tuple[int, int]] = field(default_factory=dict)
    out_of_range: dict[str, int] = field(default_factory=dict)

    def merged(self, metric: str) -> HdrHistogram:
        """All reps of one metric in one histogram."""
        total = new_histogram()
        for h in self.by_metric.get(metric, {}).values():
            total.add(h)
        return total


def build_histograms(records: Iterable[StreamRecord]) -> dict[str, GroupHistograms]:
    """Histograms per group from ok and failed records alike (a failed stream's TTFT is real)."""
    out: dict[str, GroupHistograms] = {}
    by_key: dict[tuple[str, int], list[StreamRecord]] = {}
    for r in records:
        by_key.setdefault((r.group, r.rep), []).append(r)
    for (group, rep), recs in sorted(by_key.items()):
        gh = out.setdefault(group, GroupHistograms(group))
        span = span_ns(recs)
        if span is not None:
            gh.spans[rep] = span
        for metric, values_of in HIST_METRICS.items():
            h = gh.by_metric.setdefault(metric, {}).setdefault(rep, new_histogram())
            missed = record_all(h, [v for r in recs for v in values_of(r)])
            if missed:
                gh.out_of_range[metric] = gh.out_of_range.get(metric, 0) + missed
    return out


def hlog_name(group: str, metric: str) -> str:
    """File name of a (group, metric) log: unsafe characters of the group become '_'."""
    return f"{re.sub(r'[^A-Za-z0-9_.-]', '_', group)}.{metric}.hlog"


def write_hlogs(hist_dir: Path, groups: dict[str, GroupHistograms]) -> list[str]:
    """Writes every (group, metric) log, replacing old .hlog files; returns the file names."""
    hist_dir.mkdir(parents=True, exist_ok=True)
    for old in hist_dir.glob("*.hlog"):
        old.unlink()
    names = []
    for group in sorted(groups):
        gh = groups[group]
        for metric in HIST_METRICS:
            name = hlog_name(group, metric)
            with open(hist_dir / name, "w", encoding="utf-8") as fh:
                writer = HistogramLogWriter(fh)
                writer.output_log_format_version()
                writer.output_comment(f"[loadgen group={group} metric={metric} unit=us]")
                writer.output_legend()
                for rep, h in sorted(gh.by_metric.get(metric, {}).items()):
                    t0, t1 = gh.spans.get(rep, (0, 0))
                    # Timestamps in ms on the run clock; the writer logs seconds.
                    h.set_start_time_stamp(t0 / 1e6)
                    h.set_end_time_stamp(t1 / 1e6)
                    writer.output_interval_histogram(h, t0 / 1e9, t1 / 1e9)
            names.append(name)
    return names


def read_hlog(path: Path) -> list[HdrHistogram]:
    """The interval histograms of one .hlog file, in file order."""
    reader = HistogramLogReader(str(path), new_histogram())
    try:
        out = []
        while (h := reader.get_next_interval_histogram()) is not None:
            out.append(h)
        return out
    finally:
        reader.input_file.close()


def merge_hlogs(paths: Iterable[Path]) -> HdrHistogram:
    """Every interval of every given log (e.g. one metric across runs) in one histogram."""
    total = new_histogram()
    for p in paths:
        for h in read_hlog(p):
            total.add(h)
    return total


def percentile_curve(h: HdrHistogram, percentiles: Iterable[float]) -> list[tuple[float, int]]:
    """(percentile, value in us) pairs; empty for an empty histogram."""
    if h.get_total_count() == 0:
        return []
    # One pass over the counts for all percentiles (get_value_at_percentile walks them anew
    # for each, a second of CPU per report figure); the same values.
    ps = list(percentiles)
    values = h.get_percentile_to_value_dict(ps)
    return [(p, values[p]) for p in ps]


def percentile_key(p: float) -> str:
    """summary.json's name of percentile `p`: p50, p95, p99.9."""
    return f"p{p:g}"


def metric_percentiles(
    histograms: Mapping[str, HdrHistogram], tpot: HdrHistogram, percentiles: Iterable[float]
) -> dict[str, dict[str, float | None]]:
    """Each PERCENTILE_HISTS figure at each percentile, in ms, read from `histograms` (hist/
    metric -> histogram) and `tpot`: the histogram's highest value equivalent to the one at
    that rank (3 significant digits), None where it holds no value."""
    ps = list(percentiles)
    out: dict[str, dict[str, float | None]] = {}
    for name, source in PERCENTILE_HISTS.items():
        values = dict(percentile_curve(tpot if source is None else histograms[source], ps))
        out[name] = {percentile_key(p): _ms(values.get(p)) for p in ps}
    return out


def tpot_histogram(records: Iterable[StreamRecord]) -> HdrHistogram:
    """TPOT of `records` in a histogram like hist/'s (in us, the same range and digits)."""
    h = new_histogram()
    record_all(h, [v for r in records for v in registry.metric("tpot_s").hist_values_us(r)])
    return h


def _ms(us: int | None) -> float | None:
    return None if us is None else us / US_PER_MS
