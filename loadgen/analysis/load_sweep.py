"""A load sweep's figures (`loadgen run --concurrency 1,2,4` / `--rate 1,2,inf`): per arm the row
a load table shows (the benchmark block's totals, goodput over all groups, tokens/s per user),
and across the arms the load axis and the Pareto frontier of per-user against total throughput.

Each arm's row is kept for every sweep (arms.csv exports it); the `load` block only for a sweep
whose one axis is a load (scenario/load_axis.py's LOAD_AXES).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from loadgen.analysis.benchmark import Benchmark
from loadgen.analysis.goodput import Goodput, read_goodput
from loadgen.analysis.stats import median
from loadgen.analysis.summary import MEASURE
from loadgen.codec import from_json
from loadgen.scenario.load_axis import LOAD_AXES

# The Pareto frontier's two axes, both higher-is-better: what one user sees against what the
# server delivers in all.
PARETO_AXES = ("tok_s_per_user", "output_tok_s")
# The relative gain on an axis that counts as more: a load sweep runs its arms on one boot, so
# it has no boot floor of its own, and a 0.07% gain in output tok/s earned an arm the mark on
# the H200; the seed's boots of one arm spread 0.077% (analysis/bootfloor.py), and 1% is 13x it.
PARETO_MIN_GAIN = 0.01

Point = tuple[float | None, float | None]


@dataclass(frozen=True, slots=True)
class LoadRow:
    """One arm's row of a load table: the benchmark total's request counts, throughput and
    latency p50/p90 in ms (analysis/benchmark.py), goodput over all groups (None without an SLO)
    and tokens/s per user. Its fields, in order, are arms.csv's columns after the arm's name
    and swept values."""

    requests_ok: int
    requests_failed: int
    request_per_s: float | None
    output_tok_s: float | None
    output_token_source: str | None
    ttft_median_ms: float | None
    ttft_p90_ms: float | None
    tpot_median_ms: float | None
    tpot_p90_ms: float | None
    e2e_median_ms: float | None
    e2e_p90_ms: float | None
    good: int | None
    goodput_req_s: float | None
    attainment: float | None
    tok_s_per_user: float | None


LOAD_ROW_FIELDS = tuple(f.name for f in fields(LoadRow))


@dataclass(frozen=True, slots=True)
class LoadBlock:
    """A load sweep's `load` block: the axis, each arm and its load value in arm order, the
    arms on the Pareto frontier of `pareto_axes` (a gain below `pareto_min_gain`, relative,
    is no gain), and the SLO its goodput used (None: none)."""

    axis: str
    arms: tuple[str, ...]
    values: tuple[int | float | str, ...]  # as the file has them: a concurrency stays an int
    pareto: tuple[str, ...]
    pareto_axes: tuple[str, ...]
    slo: dict[str, int | float] | None
    pareto_min_gain: float


def read_load(sweep: Mapping[str, Any]) -> LoadBlock | None:
    """A sweep summary's `load` block; None for a sweep that is not a load sweep."""
    load = sweep.get("load")
    return from_json(LoadBlock, load) if load else None


def tok_s_per_user(streams: Iterable[dict[str, Any]]) -> float | None:
    """Tokens/s per user: the median over the ok measured streams of each stream's decode-only
    rate (decode tokens / (last - first content chunk), rates.decode_tok_s: 1/TPOT wherever
    TPOT is defined). What one user reads at once the first token came, TTFT split out; None
    when no ok stream decoded two chunks."""
    return median(
        s["decode_tok_s"] for s in streams if s["phase"] == MEASURE and s["status"] == "ok"
    )


def pooled_goodput(block: Goodput | None, duration_s: float | None) -> dict[str, Any]:
    """Goodput over all groups of a summary's `goodput` block: good requests per second of the
    run's span (first intended send -> last end: the benchmark's duration, so goodput and req/s
    share one denominator) and attainment = good / all requests, failed ones counted as in each
    group's. All None without an SLO."""
    if block is None:
        return {"good": None, "goodput_req_s": None, "attainment": None}
    groups = list(block.groups.values())
    good, n = sum(g.good for g in groups), sum(g.n for g in groups)
    return {
        "good": good,
        "goodput_req_s": good / duration_s if duration_s else None,
        "attainment": good / n if n else None,
    }


def load_row(summary: dict[str, Any]) -> LoadRow:
    """One arm's load row from its own summary."""
    total = from_json(Benchmark, summary["benchmark"]).total
    return LoadRow(
        requests_ok=total.requests_ok,
        requests_failed=total.requests_failed,
        request_per_s=total.request_per_s,
        output_tok_s=total.output_tok_s,
        output_token_source=total.output_token_source,
        ttft_median_ms=total.ttft_ms.median,
        ttft_p90_ms=total.ttft_ms.p90,
        tpot_median_ms=total.tpot_ms.median,
        tpot_p90_ms=total.tpot_ms.p90,
        e2e_median_ms=total.e2e_ms.median,
        e2e_p90_ms=total.e2e_ms.p90,
        **pooled_goodput(read_goodput(summary), total.duration_s),
        tok_s_per_user=tok_s_per_user(summary["streams"]),
    )


def dominates(q: tuple[float, float], p: tuple[float, float], gain: float) -> bool:
    """q beats p by more than `gain` (relative) on one axis, and p beats q by no more than that
    on the other: p's edge within the noise is no edge."""

    def beats(a: float, b: float) -> bool:
        return a > b + gain * abs(b)

    return not any(beats(b, a) for a, b in zip(q, p, strict=True)) and any(
        beats(a, b) for a, b in zip(q, p, strict=True)
    )


def pareto_front(points: dict[str, Point], gain: float = PARETO_MIN_GAIN) -> list[str]:
    """The names of the points no other point dominates (by more than `gain`), in the input's
    order; a point missing either value is never on it (nor dominates one). Points within the
    gain of each other on both axes do not dominate each other."""
    known = {n: (a, b) for n, (a, b) in points.items() if a is not None and b is not None}
    return [n for n, p in known.items() if not any(dominates(q, p, gain) for q in known.values())]


def load_axis(arms: dict[str, dict[str, Any]]) -> str | None:
    """The sweep's load axis: every arm sets one client-side setting, the same one, and it is
    a load (concurrency or rate), with no server flag; else None."""
    keys = {tuple(sorted(a["settings"])) for a in arms.values()}
    if not arms or any(a["flags"] for a in arms.values()) or len(keys) != 1:
        return None
    (key,) = keys
    return key[0] if len(key) == 1 and key[0] in LOAD_AXES else None


def load_block(
    arms: dict[str, dict[str, Any]], order: list[str], slo: Mapping[str, float] | None
) -> LoadBlock | None:
    """The sweep's `load` block (None unless it is a load sweep)."""
    axis = load_axis(arms)
    if axis is None:
        return None
    rows = {n: from_json(LoadRow, arms[n]["load_row"]) for n in order}
    points = {n: (r.tok_s_per_user, r.output_tok_s) for n, r in rows.items()}
    return LoadBlock(
        axis=axis,
        arms=tuple(order),
        values=tuple(arms[n]["settings"][axis] for n in order),
        pareto=tuple(pareto_front(points)),
        pareto_axes=PARETO_AXES,
        slo=None if slo is None else dict(slo),
        pareto_min_gain=PARETO_MIN_GAIN,
    )
