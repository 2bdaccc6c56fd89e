"""A load sweep's figures (`loadgen run --concurrency 1,2,4` / `--rate 1,2,inf`): per arm the row
a load table shows (the benchmark block's totals, goodput over all groups, tokens/s per user),
and across the arms the load axis and the Pareto frontier of per-user against total throughput.

Each arm's row is kept for every sweep (arms.csv exports it); the `load` block only for a sweep
whose one axis is a load (scenario/load_axis.py's LOAD_AXES).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from loadgen.analysis.goodput import Goodput, read_goodput
from loadgen.analysis.stats import median
from loadgen.analysis.summary import MEASURE
from loadgen.scenario.load_axis import LOAD_AXES

# The benchmark total's fields a load row copies as they are (analysis/benchmark.py).
LOAD_SCALARS = (
    "requests_ok",
    "requests_failed",
    "request_per_s",
    "output_tok_s",
    "output_token_source",
)
# The benchmark total's latencies a load row keeps, and which of their statistics.
LOAD_LATENCIES = ("ttft_ms", "tpot_ms", "e2e_ms")
LOAD_STATS = ("median", "p90")
# The Pareto frontier's two axes, both higher-is-better: what one user sees against what the
# server delivers in all.
PARETO_AXES = ("tok_s_per_user", "output_tok_s")

Point = tuple[float | None, float | None]


def latency_key(metric: str, stat: str) -> str:
    """The load row's name of one latency statistic: ttft_ms, median -> ttft_median_ms."""
    return f"{metric.removesuffix('_ms')}_{stat}_ms"


LOAD_ROW_FIELDS = (
    *LOAD_SCALARS,
    *(latency_key(m, s) for m in LOAD_LATENCIES for s in LOAD_STATS),
    "good",
    "goodput_req_s",
    "attainment",
    "tok_s_per_user",
)


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


def load_row(summary: dict[str, Any]) -> dict[str, Any]:
    """One arm's load row (LOAD_ROW_FIELDS) from its own summary."""
    total = summary["benchmark"]["total"]
    row = {k: total[k] for k in LOAD_SCALARS}
    row |= {latency_key(m, s): total[m][s] for m in LOAD_LATENCIES for s in LOAD_STATS}
    row |= pooled_goodput(read_goodput(summary), total["duration_s"])
    row["tok_s_per_user"] = tok_s_per_user(summary["streams"])
    return row


def dominates(q: tuple[float, float], p: tuple[float, float]) -> bool:
    """q is at least as high as p on both axes and higher on one."""
    return q[0] >= p[0] and q[1] >= p[1] and q != p


def pareto_front(points: dict[str, Point]) -> list[str]:
    """The names of the points no other point dominates, in the input's order; a point missing
    either value is never on it (nor dominates one). Equal points are both on it."""
    known = {n: (a, b) for n, (a, b) in points.items() if a is not None and b is not None}
    return [n for n, p in known.items() if not any(dominates(q, p) for q in known.values())]


def load_axis(arms: dict[str, dict[str, Any]]) -> str | None:
    """The sweep's load axis: every arm sets one client-side setting, the same one, and it is
    a load (concurrency or rate), with no server flag; else None."""
    keys = {tuple(sorted(a["settings"])) for a in arms.values()}
    if not arms or any(a["flags"] for a in arms.values()) or len(keys) != 1:
        return None
    (key,) = keys
    return key[0] if len(key) == 1 and key[0] in LOAD_AXES else None


def load_block(
    arms: dict[str, dict[str, Any]], order: list[str], slo: dict[str, float] | None
) -> dict[str, Any] | None:
    """The sweep's `load` block (None unless it is a load sweep): the axis, its values and arms
    in arm order, the arms on the Pareto frontier of PARETO_AXES, and the SLO goodput used."""
    axis = load_axis(arms)
    if axis is None:
        return None
    rows = {n: arms[n]["load_row"] for n in order}
    points = {n: (r[PARETO_AXES[0]], r[PARETO_AXES[1]]) for n, r in rows.items()}
    return {
        "axis": axis,
        "arms": order,
        "values": [arms[n]["settings"][axis] for n in order],
        "pareto": pareto_front(points),
        "pareto_axes": list(PARETO_AXES),
        "slo": slo,
    }
