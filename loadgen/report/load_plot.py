"""A load sweep's figures, one point per arm labelled with its load value (analysis/load_sweep.py):
- load.png: TTFT and TPOT p50 / p90, and goodput beside req/s where an SLO was given, against
  output tok/s: where the latency knee sits on the throughput axis;
- pareto.png: tokens/s per user against output tokens/s in all, the arms that no other arm
  beats on both joined by the frontier's step line.
Nothing is drawn for a sweep that is not a load sweep.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from loadgen.report.plots import png_bytes
from loadgen.report.sweep_text import load_label

# Written beside a load sweep's report.html, which embeds them too.
LOAD_PNG = "load.png"
PARETO_PNG = "pareto.png"
# (load row key, label) of each latency panel of load.png: p50 solid, p90 dashed.
LATENCY_PANELS = (
    (("ttft_median_ms", "ttft_p90_ms"), "TTFT (ms)"),
    (("tpot_median_ms", "tpot_p90_ms"), "TPOT (ms)"),
)

# (load row key, line style, colour, legend) of the goodput panel: goodput beside plain req/s,
# so the gap between them is the requests that missed an SLO.
GOODPUT_LINES = (
    ("request_per_s", ":", "0.5", "req/s (ok)"),
    ("goodput_req_s", "-", "C2", "goodput req/s"),
)


@dataclass(frozen=True, slots=True)
class LoadPoint:
    """One arm of a load sweep: its load value as printed, its load row, and whether it is on
    the Pareto frontier."""

    label: str
    row: dict[str, Any]
    on_front: bool


def load_points(sweep: dict[str, Any]) -> list[LoadPoint]:
    """The arms of a sweep's `load` block in arm order (none for any other sweep)."""
    load = sweep.get("load")
    if not load:
        return []
    front = set(load["pareto"])
    return [
        LoadPoint(load_label(v), sweep["arms"][n]["load_row"], n in front)
        for n, v in zip(load["arms"], load["values"], strict=True)
    ]


def _drawn(points: list[LoadPoint], key: str) -> list[LoadPoint]:
    """The points that have both an output tok/s (x) and a value of `key` (y)."""
    return [p for p in points if p.row["output_tok_s"] is not None and p.row[key] is not None]


def _xy(points: list[LoadPoint], key: str) -> tuple[list[float], list[float]]:
    drawn = _drawn(points, key)
    return [p.row["output_tok_s"] for p in drawn], [p.row[key] for p in drawn]


def _labelled(ax: Axes, points: list[LoadPoint], key: str) -> None:
    """Each drawn point of `key` named by its load value."""
    for p in _drawn(points, key):
        ax.annotate(p.label, (p.row["output_tok_s"], p.row[key]), textcoords="offset points",
                    xytext=(4, 4), fontsize=8)  # fmt: skip


def _panel(ax: Axes, ylabel: str, title: str) -> None:
    ax.set_xlabel("output tok/s (all ok streams)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    # y from 0; room above and right of the last points for their labels ("inf" was cut off).
    ax.set_ylim(0, ax.get_ylim()[1] * 1.08)
    lo, hi = ax.get_xlim()
    ax.set_xlim(lo, hi + 0.06 * (hi - lo))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")


def load_png(points: list[LoadPoint], axis: str, slo: bool) -> bytes | None:
    """Latency panels (and goodput with `slo`) against output tok/s; None without a point that
    has a throughput."""
    if not any(p.row["output_tok_s"] is not None for p in points):
        return None
    n = len(LATENCY_PANELS) + slo
    fig = Figure(figsize=(5.5 * n, 4.4))
    for i, ((p50, p90), label) in enumerate(LATENCY_PANELS):
        ax = fig.add_subplot(1, n, i + 1)
        for key, style, name in ((p50, "-", "p50"), (p90, "--", "p90")):
            ax.plot(*_xy(points, key), marker="o", linestyle=style, color="C0", label=name)
        _labelled(ax, points, p90)
        _panel(ax, label, f"{label.split()[0]} against throughput")
    if slo:
        ax = fig.add_subplot(1, n, n)
        for key, style, colour, name in GOODPUT_LINES:
            ax.plot(*_xy(points, key), marker="o", linestyle=style, color=colour, label=name)
        _labelled(ax, points, "goodput_req_s")
        _panel(ax, "requests/s", "goodput (every SLO met) against throughput")
    fig.suptitle(f"Load sweep over {axis}: one point per arm, labelled with its {axis}")
    fig.tight_layout()
    return png_bytes(fig)


def pareto_png(points: list[LoadPoint], axis: str) -> bytes | None:
    """Tokens/s per user (y) against output tok/s (x), the frontier as a step line; None
    without a point that has both."""
    key = "tok_s_per_user"
    drawn = _drawn(points, key)
    if not drawn:
        return None
    fig = Figure(figsize=(6.5, 4.8))
    ax = fig.add_subplot(1, 1, 1)
    front = sorted((p.row["output_tok_s"], p.row[key]) for p in drawn if p.on_front)
    # Left to right the frontier falls; between two of its arms the best per-user rate still
    # reachable is the right one's, hence steps drawn at each arm's x ("pre").
    ax.step([f[0] for f in front], [f[1] for f in front], where="pre", color="C3",
            label="Pareto frontier")  # fmt: skip
    ax.scatter(*_xy(points, key), c=["C3" if p.on_front else "none" for p in drawn],
               edgecolors="C3", zorder=3, label="arm (filled: on the frontier)")  # fmt: skip
    _labelled(ax, points, key)
    ax.set_xlim(left=0)
    _panel(ax, "tok/s per user (median decode-only rate, 1/TPOT)",
           f"Per-user against total throughput across {axis}")  # fmt: skip
    fig.tight_layout()
    return png_bytes(fig)


def load_figures(sweep: dict[str, Any]) -> dict[str, bytes]:
    """File name -> PNG of a load sweep's figures; empty for any other sweep."""
    points = load_points(sweep)
    if not points:
        return {}
    axis, slo = sweep["load"]["axis"], bool(sweep["load"].get("slo"))
    figures = {LOAD_PNG: load_png(points, axis, slo), PARETO_PNG: pareto_png(points, axis)}
    return {name: png for name, png in figures.items() if png is not None}
