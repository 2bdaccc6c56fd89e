"""A load sweep's figures, one point per arm labelled with its load value (analysis/load_sweep.py):
- load.png: TTFT and TPOT p50 / p90, and goodput beside req/s where an SLO was given, against
  output tok/s: where the latency knee sits on the throughput axis;
- pareto.png: tokens/s per user against output tokens/s in all, the arms that no other arm
  beats on both joined by the frontier's step line.
Nothing is drawn for a sweep that is not a load sweep.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from loadgen.analysis.load_sweep import LoadBlock, LoadRow
from loadgen.analysis.sweep_types import SweepSummary
from loadgen.report.plots import png_bytes
from loadgen.report.sweep_text import load_label

# Written beside a load sweep's report.html, which embeds them too.
LOAD_PNG = "load.png"
PARETO_PNG = "pareto.png"
# One figure of a load row, drawn against its output tok/s.
RowFigure = Callable[[LoadRow], float | None]


# ((p50, p90) of the load row, label) of each latency panel of load.png: p50 solid, p90 dashed.
LATENCY_PANELS: tuple[tuple[tuple[RowFigure, RowFigure], str], ...] = (
    ((lambda r: r.ttft_median_ms, lambda r: r.ttft_p90_ms), "TTFT (ms)"),
    ((lambda r: r.tpot_median_ms, lambda r: r.tpot_p90_ms), "TPOT (ms)"),
)


def _goodput_req_s(r: LoadRow) -> float | None:
    return r.goodput_req_s


# (load row figure, line style, colour, legend) of the goodput panel: goodput beside plain
# req/s, so the gap between them is the requests that missed an SLO.
GOODPUT_LINES: tuple[tuple[RowFigure, str, str, str], ...] = (
    (lambda r: r.request_per_s, ":", "0.5", "req/s (ok)"),
    (_goodput_req_s, "-", "C2", "goodput req/s"),
)


def _tok_s_per_user(r: LoadRow) -> float | None:
    return r.tok_s_per_user


@dataclass(frozen=True, slots=True)
class LoadPoint:
    """One arm of a load sweep: its load value as printed, its load row, and whether it is on
    the Pareto frontier."""

    label: str
    row: LoadRow
    on_front: bool


def load_points(s: SweepSummary, load: LoadBlock) -> list[LoadPoint]:
    """The arms of the sweep's load block in arm order."""
    return [
        LoadPoint(load_label(v), s.arms[n].load_row, n in load.pareto)
        for n, v in zip(load.arms, load.values, strict=True)
    ]


def _xy(points: list[LoadPoint], y: RowFigure) -> list[tuple[LoadPoint, float, float]]:
    """The points that have both an output tok/s (x) and a value of `y`, with the two."""
    return [
        (p, x, v)
        for p in points
        if (x := p.row.output_tok_s) is not None and (v := y(p.row)) is not None
    ]


def _line(points: list[LoadPoint], y: RowFigure) -> tuple[list[float], list[float]]:
    drawn = _xy(points, y)
    return [x for _, x, _ in drawn], [v for _, _, v in drawn]


def _labelled(ax: Axes, points: list[LoadPoint], y: RowFigure) -> None:
    """Each drawn point of `y` named by its load value."""
    for p, x, v in _xy(points, y):
        ax.annotate(p.label, (x, v), textcoords="offset points", xytext=(4, 4), fontsize=8)


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
    if not any(p.row.output_tok_s is not None for p in points):
        return None
    n = len(LATENCY_PANELS) + slo
    fig = Figure(figsize=(5.5 * n, 4.4))
    for i, ((p50, p90), label) in enumerate(LATENCY_PANELS):
        ax = fig.add_subplot(1, n, i + 1)
        for y, style, name in ((p50, "-", "p50"), (p90, "--", "p90")):
            ax.plot(*_line(points, y), marker="o", linestyle=style, color="C0", label=name)
        _labelled(ax, points, p90)
        _panel(ax, label, f"{label.split()[0]} against throughput")
    if slo:
        ax = fig.add_subplot(1, n, n)
        for y, style, colour, name in GOODPUT_LINES:
            ax.plot(*_line(points, y), marker="o", linestyle=style, color=colour, label=name)
        _labelled(ax, points, _goodput_req_s)
        _panel(ax, "requests/s", "goodput (every SLO met) against throughput")
    fig.suptitle(f"Load sweep over {axis}: one point per arm, labelled with its {axis}")
    fig.tight_layout()
    return png_bytes(fig)


def pareto_png(points: list[LoadPoint], axis: str) -> bytes | None:
    """Tokens/s per user (y) against output tok/s (x), the frontier as a step line; None
    without a point that has both."""
    drawn = _xy(points, _tok_s_per_user)
    if not drawn:
        return None
    fig = Figure(figsize=(6.5, 4.8))
    ax = fig.add_subplot(1, 1, 1)
    front = sorted((x, v) for p, x, v in drawn if p.on_front)
    # Left to right the frontier falls; between two of its arms the best per-user rate still
    # reachable is the right one's, hence steps drawn at each arm's x ("pre").
    ax.step([f[0] for f in front], [f[1] for f in front], where="pre", color="C3",
            label="Pareto frontier")  # fmt: skip
    ax.scatter(*_line(points, _tok_s_per_user),
               c=["C3" if p.on_front else "none" for p, _, _ in drawn],
               edgecolors="C3", zorder=3, label="arm (filled: on the frontier)")  # fmt: skip
    _labelled(ax, points, _tok_s_per_user)
    ax.set_xlim(left=0)
    _panel(ax, "tok/s per user (median decode-only rate, 1/TPOT)",
           f"Per-user against total throughput across {axis}")  # fmt: skip
    fig.tight_layout()
    return png_bytes(fig)


def load_figures(s: SweepSummary) -> dict[str, bytes]:
    """File name -> PNG of a load sweep's figures; empty for any other sweep."""
    if s.load is None or not s.load.arms:
        return {}
    points = load_points(s, s.load)
    axis, slo = s.load.axis, bool(s.load.slo)
    figures = {LOAD_PNG: load_png(points, axis, slo), PARETO_PNG: pareto_png(points, axis)}
    return {name: png for name, png in figures.items() if png is not None}
