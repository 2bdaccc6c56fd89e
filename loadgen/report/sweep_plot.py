"""A sweep's figures against the swept flag: each metric on its own panel, x = the flag's value
(a server flag such as max_num_batched_tokens, or a client-side setting), one point per boot.

The input is a list of SweepPoints, so anything that has a value per boot can be drawn: the
sim's sweeps have one boot per arm (the sim is deterministic), a real server's have two or more,
and each boot is its own point, so the boot-to-boot spread is in the picture rather than
averaged away. A point's value may carry a min..max range (e.g. over the minnows of that boot),
drawn as a vertical bar through it.

`sweep_points()` reads a sweep parent's summary (loadgen.analysis.sweep): per arm, the entries
of `boots` when the arm has them (each shaped like the arm itself), else the arm as its one boot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from matplotlib.figure import Figure

from loadgen.analysis.sweep_boots import metric_names
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


def swept_axis(sweep: dict[str, Any]) -> str | None:
    """The one flag or setting whose numeric value differs between arms, else None."""
    arms = list(sweep.get("arms", {}).values())
    values: dict[str, set[Any]] = {}
    for arm in arms:
        for k, v in {**(arm.get("settings") or {}), **(arm.get("flags") or {})}.items():
            values.setdefault(k, set()).add(v)
    varying = [k for k, vs in values.items() if len(vs) > 1]
    if len(varying) != 1:
        return None
    axis = varying[0]
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values[axis])
    return axis if numeric else None


def sweep_points(sweep: dict[str, Any], axis: str) -> list[SweepPoint]:
    """One point per boot of every arm that has a whale/minnows row."""
    out = []
    for name, arm in sweep.get("arms", {}).items():
        x = {**(arm.get("settings") or {}), **(arm.get("flags") or {})}.get(axis)
        if x is None:
            continue
        for boot, entry in enumerate(arm.get("boots") or [arm]):
            row = entry.get("row")
            if row is None:
                continue
            values, ranges = {}, {}
            for key, value in row.items():
                if isinstance(value, dict) and "median" in value:
                    values[key] = value["median"]
                    if value.get("min") is not None and value.get("max") is not None:
                        ranges[key] = (value["min"], value["max"])
                elif isinstance(value, int | float):
                    values[key] = value
            out.append(SweepPoint(name, boot, float(x), values, ranges))
    return out


def booted_points(sweep: dict[str, Any]) -> tuple[str, list[SweepPoint], dict[float, str] | None]:
    """A restarted sweep's measured boots (`boots` of loadgen.analysis.sweep_boots) as points:
    x is the one numeric server flag that differs, else the arm's index, named by tick labels."""
    boots = [p for p in sweep.get("boots") or [] if p["values"]]
    arms = list(dict.fromkeys(p["arm"] for p in sorted(boots, key=lambda p: p["order"])))
    flags = {p["arm"]: p["flags"] for p in boots}
    keys = {k for f in flags.values() for k in f}
    values = {a: flags[a].get(next(iter(keys))) for a in arms} if len(keys) == 1 else {}
    numeric = values and all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in values.values()
    )
    axis, xs, ticks = (
        (next(iter(keys)), {a: float(v) for a, v in values.items()}, None)
        if numeric
        else (
            "arm",
            {a: float(i) for i, a in enumerate(arms)},
            {float(i): a for i, a in enumerate(arms)},
        )
    )
    points = [SweepPoint(p["arm"], p["boot"] - 1, xs[p["arm"]], p["values"], {}) for p in boots]
    return axis, points, ticks


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


def sweep_figure(sweep: dict[str, Any]) -> bytes | None:
    """The figure of a sweep parent's summary: every measured boot of a restarted sweep, else
    the politeness metrics per arm; None when there is nothing to draw."""
    if sweep.get("boots"):
        axis, points, ticks = booted_points(sweep)
        names = metric_names([{"values": p.values} for p in points])
        metrics = [SweepMetric(n, metric_label(n)) for n in names]
        return sweep_png(points, axis, metrics, ticks)
    swept = swept_axis(sweep)
    if swept is None:
        return None
    return sweep_png(sweep_points(sweep, swept), swept)
