"""A sweep's figures against the swept flag: each metric on its own panel, x = the flag's value
(a server flag such as max_num_batched_tokens, or a client-side setting), one point per boot.

The input is a list of SweepPoints, so anything that has a value per boot can be drawn: the
sim's sweeps have one boot per arm (the sim is deterministic), a real server's have two or more,
and each boot is its own point, so the boot-to-boot spread is in the picture rather than
averaged away. A point's value may carry a min..max range (e.g. over the minnows of that boot),
drawn as a vertical bar through it.

`sweep_points()` reads a sweep parent's arms (a `SweepSummary`, loadgen.analysis.sweep_types): one
point per arm with a politeness row; `booted_points()` one per measured boot of a sweep that
booted its arms.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from matplotlib.figure import Figure

from loadgen.analysis.sweep_boots import metric_names
from loadgen.analysis.sweep_types import MixedRow, SweepSummary
from loadgen.report.boot_tables import metric_label
from loadgen.report.plots import png_bytes

# Written beside a sweep parent's report.html, which embeds it too.
SWEEP_PNG = "sweep.png"


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """One boot of one arm: the swept value, and each metric's value with an optional range."""

    arm: str
    boot: int
    x: float
    values: dict[str, float | None]
    ranges: dict[str, tuple[float, float]]


@dataclass(frozen=True, slots=True)
class SweepMetric:
    key: str
    label: str


# The politeness sweep's question: what the budget does to the minnows' decode while the whale
# prefills, and what it costs the whale.
POLITENESS_METRICS = (
    SweepMetric("minnow_decode_during_tok_s", "minnow decode during whale prefill (tok/s)"),
    SweepMetric("whale_ttft_s", "whale TTFT (s)"),
)


def _is_number(v: Any) -> TypeGuard[int | float]:
    return isinstance(v, int | float) and not isinstance(v, bool)


def swept_axis(s: SweepSummary) -> str | None:
    """The one flag or setting whose numeric value differs between arms, else None."""
    values: dict[str, set[Any]] = {}
    for arm in s.arms.values():
        for k, v in arm.swept.items():
            values.setdefault(k, set()).add(v)
    varying = [k for k, vs in values.items() if len(vs) > 1]
    if len(varying) != 1:
        return None
    axis = varying[0]
    return axis if all(_is_number(v) for v in values[axis]) else None


def row_point(arm: str, x: float, row: MixedRow) -> SweepPoint:
    """An arm's politeness row as its one point: medians, the minnows' min..max as ranges."""
    spread = {
        "minnow_ttft_s": row.minnow_ttft_s,
        "minnow_decode_during_tok_s": row.minnow_decode_during_tok_s,
        "minnow_decode_after_tok_s": row.minnow_decode_after_tok_s,
    }
    values = {"whale_ttft_s": row.whale_ttft_s, "wall_s": row.wall_s}
    values |= {k: st.median for k, st in spread.items()}
    ranges = {
        k: (st.min, st.max) for k, st in spread.items() if st.min is not None and st.max is not None
    }
    return SweepPoint(arm, 0, x, values, ranges)


def sweep_points(s: SweepSummary, axis: str) -> list[SweepPoint]:
    """One point per arm that sets `axis` and has a whale/minnows row."""
    return [
        row_point(name, float(arm.swept[axis]), arm.row)
        for name, arm in s.arms.items()
        if arm.swept.get(axis) is not None and arm.row is not None
    ]


def booted_points(s: SweepSummary) -> tuple[str, list[SweepPoint], dict[float, str] | None]:
    """A restarted sweep's measured boots (`boots` of loadgen.analysis.sweep_boots) as points:
    x is the one numeric server flag that differs, else the arm's index, named by tick labels."""
    boots = [p for p in s.boots if p.values]
    arms = list(dict.fromkeys(p.arm for p in sorted(boots, key=lambda p: p.order)))
    flags = {p.arm: p.flags for p in boots}
    keys = {k for f in flags.values() for k in f}
    key = next(iter(keys)) if len(keys) == 1 else None
    values = {a: flags[a].get(key) for a in arms} if key is not None else {}
    xs = {a: float(v) for a, v in values.items() if _is_number(v)}
    ticks = None
    if key is None or not values or len(xs) < len(values):
        key, xs = "arm", {a: float(i) for i, a in enumerate(arms)}
        ticks = {float(i): a for i, a in enumerate(arms)}
    points = [SweepPoint(p.arm, p.boot - 1, xs[p.arm], dict(p.values or {}), {}) for p in boots]
    return key, points, ticks


def sweep_png(
    points: Sequence[SweepPoint],
    axis: str,
    metrics: Sequence[SweepMetric] = POLITENESS_METRICS,
    ticks: dict[float, str] | None = None,
) -> bytes | None:
    """Each metric against `axis`, one marker per boot (range bars where known); None when no
    metric has a value. `ticks` names the x positions of a non-numeric axis."""
    drawn = [m for m in metrics if any(p.values.get(m.key) is not None for p in points)]
    if not drawn:
        return None
    fig = Figure(figsize=(6.5 * len(drawn), 4.6))
    xs = sorted({p.x for p in points})
    log_x = xs[0] > 0 and xs[-1] / xs[0] >= 8
    for i, metric in enumerate(drawn):
        ax = fig.add_subplot(1, len(drawn), i + 1)
        boots = sorted({p.boot for p in points})
        for boot in boots:
            mine = sorted((p for p in points if p.boot == boot), key=lambda p: p.x)
            have = [(p, v) for p in mine if (v := p.values.get(metric.key)) is not None]
            px = [p.x for p, _ in have]
            py = [v for _, v in have]
            ax.plot(px, py, marker="o", linestyle="-" if len(boots) == 1 else ":",
                    color=f"C{boot % 10}", label=f"boot {boot + 1}")  # fmt: skip
            for p, _ in have:
                if metric.key in p.ranges:
                    lo, hi = p.ranges[metric.key]
                    ax.vlines(p.x, lo, hi, color=f"C{boot % 10}", alpha=0.5)
        if log_x and ticks is None:
            ax.set_xscale("log", base=2)
        labels = [ticks[x] for x in xs] if ticks else [f"{x:g}" for x in xs]
        ax.set_xticks(xs, labels, rotation=45 if len(xs) > 6 or ticks else 0)
        ax.minorticks_off()
        ax.set_xlabel(axis)
        ax.set_ylabel(metric.label)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        if len(boots) > 1:
            ax.legend(fontsize=8)
    fig.suptitle(f"Across the sweep of {axis}: one point per boot (bars: min..max over streams)")
    fig.tight_layout()
    return png_bytes(fig)


def sweep_figure(s: SweepSummary) -> bytes | None:
    """The figure of a sweep parent: every measured boot of a restarted sweep, else the
    politeness metrics per arm; None when there is nothing to draw."""
    if s.boots:
        axis, points, ticks = booted_points(s)
        metrics = [SweepMetric(n, metric_label(n)) for n in metric_names(p.values for p in points)]
        return sweep_png(points, axis, metrics, ticks)
    swept = swept_axis(s)
    if swept is None:
        return None
    return sweep_png(sweep_points(s, swept), swept)
