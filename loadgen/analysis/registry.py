"""The per-stream metric registry: every quantity a stream is measured by, declared once.

One entry names a metric's summary field, what it is, its unit, the function that computes it
from a record (rates.py holds the definitions), and where else it appears: the statistics of a
group and of a rep, the HDR histogram it feeds, the SLO it can bound, the column a report table
gives it. summary.json's stream rows, group and rep statistics, hist/*.hlog, goodput's and
capacity's SLO items, the fidelity table and the report's stream columns all read this table,
so a new metric is one entry here and shows up everywhere it is flagged for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from loadgen.analysis import rates
from loadgen.records import StreamRecord

# Unit of an SLO limit -> seconds in it (a summary field in s compared against a limit in ms).
_SECONDS_IN = {"s": 1.0, "ms": 1e-3}
US = 1_000


@dataclass(frozen=True, slots=True)
class Metric:
    """One scalar per stream (None where the stream has none)."""

    name: str  # the summary stream field
    label: str  # what it is, for sentences and tables
    unit: str  # of the summary field: s, tok/s, chunks/s, tokens, tok/chunk
    of: Callable[[StreamRecord], float | int | None]
    column: str  # a report table's column header
    group_stats: bool = False  # described (n, min, median, p90, ...) per group
    rep_stats: bool = False  # described per rep row
    rep_medians: bool = False  # the median of each rep, and their spread, per group
    hist: str | None = None  # the hist/*.hlog metric of its values, in us
    slo_unit: str | None = None  # an SLO can bound it, its limit given in this unit

    @property
    def stem(self) -> str:
        """The field's name without its unit (`tpot` of `tpot_s`): what --slo items say."""
        return self.name.rsplit("_", 1)[0]

    @property
    def slo_key(self) -> str | None:
        """The SLO's name for this metric (`tpot_ms`): the field's stem and the SLO's unit."""
        return None if self.slo_unit is None else f"{self.stem}_{self.slo_unit}"

    @property
    def slo_factor(self) -> float:
        """An SLO limit times this is in the field's unit (seconds)."""
        return _SECONDS_IN[self.slo_unit or "s"]

    def hist_values_us(self, rec: StreamRecord) -> list[float]:
        value = self.of(rec)
        return [] if value is None else [value * 1e6]


@dataclass(frozen=True, slots=True)
class GapMetric:
    """The gaps between a stream's arrivals: a distribution per stream, pooled per group."""

    name: str  # the summary field of its statistics, in ms
    label: str
    gaps_ns: Callable[[StreamRecord], list[int] | list[float]]
    hist: str

    def hist_values_us(self, rec: StreamRecord) -> list[float]:
        return [g / US for g in self.gaps_ns(rec)]


def _tokens_per_chunk(rec: StreamRecord) -> float | None:
    return rec.completion_tokens / rec.chunks if rec.chunks else None


def _late_s(rec: StreamRecord) -> float | None:
    return None if rec.t_sent_ns is None else (rec.t_sent_ns - rec.t_intended_ns) / rates.NS


STREAM_METRICS: tuple[Metric, ...] = (
    Metric("prompt_tokens", "prompt tokens", "tokens", lambda r: r.prompt_tokens, "prompt",
           group_stats=True),
    Metric("cached_tokens", "cached prompt tokens", "tokens", lambda r: r.cached_tokens,
           "cached"),
    Metric("completion_tokens", "completion tokens", "tokens", lambda r: r.completion_tokens,
           "tokens", group_stats=True),
    Metric("chunks", "content chunks", "chunks", lambda r: r.chunks, "chunks"),
    Metric("tokens_per_chunk", "tokens per chunk", "tok/chunk", _tokens_per_chunk, "tok/chunk",
           group_stats=True),
    Metric("late_s", "client lateness", "s", _late_s, "late s", group_stats=True),
    Metric("ttft_intended_s", "TTFT from the intended send", "s",
           lambda r: rates.ttft_s(r, from_intended=True), "TTFT from intended s",
           group_stats=True, hist="ttft_corrected"),
    Metric("ttft_s", "TTFT", "s", rates.ttft_s, "TTFT s", group_stats=True, rep_stats=True,
           rep_medians=True, hist="ttft_uncorrected", slo_unit="s"),
    Metric("e2e_intended_s", "E2E from the intended send", "s",
           lambda r: rates.e2e_s(r, from_intended=True), "e2e from intended s",
           group_stats=True, hist="e2e_corrected"),
    Metric("e2e_s", "E2E", "s", rates.e2e_s, "e2e s", group_stats=True, rep_stats=True,
           rep_medians=True, hist="e2e_uncorrected", slo_unit="s"),
    Metric("decode_tok_s", "decode-only rate", "tok/s", rates.decode_tok_s, "decode tok/s",
           group_stats=True, rep_stats=True, rep_medians=True),
    Metric("chunks_per_s", "chunk rate", "chunks/s", rates.chunks_per_s, "chunks/s",
           group_stats=True, rep_medians=True),
    Metric("tpot_s", "TPOT", "s", rates.tpot_s, "TPOT s", group_stats=True, slo_unit="ms"),
    Metric("ttfo_s", "time to first output token", "s", rates.ttfo_s, "TTFO s"),
    Metric("ttfo_intended_s", "TTFO from the intended send", "s",
           lambda r: rates.ttfo_s(r, from_intended=True), "TTFO from intended s"),
    Metric("reasoning_tok_s", "reasoning decode rate", "tok/s", rates.reasoning_tok_s,
           "reasoning tok/s"),
    Metric("output_tok_s", "output decode rate", "tok/s", rates.output_tok_s, "output tok/s"),
)  # fmt: skip

GAP_METRICS: tuple[GapMetric, ...] = (
    GapMetric("itl_token_ms", "token gap", rates.token_gaps_ns, "itl_token"),
    GapMetric("itl_chunk_ms", "chunk gap", rates.chunk_gaps_ns, "itl_chunk"),
)

_BY_NAME = {m.name: m for m in STREAM_METRICS}


def metric(name: str) -> Metric:
    """The registered metric of a summary stream field (KeyError names an unknown one)."""
    return _BY_NAME[name]


def names_where(flag: str) -> tuple[str, ...]:
    """The fields of the metrics whose boolean `flag` (group_stats, rep_stats, rep_medians) is
    set, in registry order."""
    return tuple(m.name for m in STREAM_METRICS if getattr(m, flag))


def slo_metrics() -> dict[str, Metric]:
    """SLO key (`ttft_s`, `tpot_ms`, `e2e_s`) -> the metric it bounds."""
    return {m.slo_key: m for m in STREAM_METRICS if m.slo_key is not None}


def histogram_sources() -> dict[str, Callable[[StreamRecord], list[float]]]:
    """hist/*.hlog metric -> a record's values in us: the scalar metrics, then the gaps."""
    out: dict[str, Callable[[StreamRecord], list[float]]] = {
        m.hist: m.hist_values_us for m in STREAM_METRICS if m.hist is not None
    }
    return out | {g.hist: g.hist_values_us for g in GAP_METRICS}
