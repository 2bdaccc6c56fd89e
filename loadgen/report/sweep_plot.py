"""Each metric of a booted sweep against the swept flag, one point per boot, and the arm's
mean as a line: the boot-to-boot spread is seen beside the effect, as the floor verdict reads it.
"""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure

from loadgen.analysis.sweep_boots import metric_names
from loadgen.report.boot_tables import metric_label
from loadgen.report.plots import _png

BOOT_MARKERS = ("o", "s", "^", "D", "v", "P")


def _x_axis(points: list[dict[str, Any]]) -> tuple[str, dict[str, float], list[str] | None]:
    """(axis label, x of each arm, tick labels or None): the flag's value when the sweep has
    one numeric server flag, else the arms in order."""
    arms = list(dict.fromkeys(p["arm"] for p in sorted(points, key=lambda p: p["order"])))
    flags = {p["arm"]: p["flags"] for p in points}
    keys = {k for f in flags.values() for k in f}
    if len(keys) == 1:
        (key,) = keys
        values = {a: flags[a].get(key) for a in arms}
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values.values()):
            return key, {a: float(v) for a, v in values.items()}, None
    return "arm", {a: float(i) for i, a in enumerate(arms)}, arms


def sweep_png(sweep: dict[str, Any]) -> bytes | None:
    """The plot, or None when the sweep recorded no measured boots."""
    points = [p for p in sweep.get("boots") or [] if p["values"]]
    metrics = metric_names(points)
    if not metrics:
        return None
    xlabel, xs, ticks = _x_axis(points)
    fig = Figure(figsize=(4.2 * len(metrics), 3.4))
    for i, metric in enumerate(metrics, 1):
        ax = fig.add_subplot(1, len(metrics), i)
        ax.set_title(metric_label(metric), fontsize=9)
        if all(p["values"].get(metric) is None for p in points):
            ax.text(0.5, 0.5, "no boot measured this", ha="center", transform=ax.transAxes)
            continue
        for boot in sorted({p["boot"] for p in points}):
            mine = [p for p in points if p["boot"] == boot and p["values"].get(metric) is not None]
            ax.scatter(
                [xs[p["arm"]] for p in mine], [p["values"][metric] for p in mine],
                marker=BOOT_MARKERS[(boot - 1) % len(BOOT_MARKERS)], label=f"boot {boot}",
                alpha=0.8,
            )  # fmt: skip
        means = []
        for arm, x in sorted(xs.items(), key=lambda kv: kv[1]):
            vals = [p["values"][metric] for p in points if p["arm"] == arm]
            vals = [v for v in vals if v is not None]
            if vals:
                means.append((x, sum(vals) / len(vals)))
        if means:
            ax.plot(*zip(*means, strict=True), color="#555555", lw=1, label="arm mean")
        ax.set_xlabel(xlabel, fontsize=8)
        if ticks is not None:
            ax.set_xticks(range(len(ticks)), ticks, rotation=20, fontsize=7)
        elif len(xs) > 1 and min(xs.values()) > 0 and max(xs.values()) / min(xs.values()) >= 8:
            ax.set_xscale("log", base=2)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return _png(fig)
