"""The tables of a sweep that booted its arms: the seed's politeness table over boots (every
boot's figure beside the arm's mean) with the boot-floor verdict of each arm against the first,
and the boots themselves in run order (status, cache probe)."""

from __future__ import annotations

from loadgen.analysis.bootfloor import ArmEffect
from loadgen.analysis.sweep_boots import ROW_METRICS, metric_names
from loadgen.analysis.sweep_types import SweepSummary
from loadgen.report.tables import DASH, Table, rate, secs

_LABELS = {key: (label, unit) for key, label, unit in ROW_METRICS}


def _fmt(metric: str, x: float | None) -> str:
    return rate(x) if metric.endswith("tok_s") else secs(x)


def metric_label(metric: str) -> str:
    label, _unit = _LABELS.get(metric, (metric, ""))
    return label


def _pct(x: float | None) -> str:
    return DASH if x is None else f"{100 * x:+.2f}%"


def _verdict_cell(row: ArmEffect | None) -> str:
    if row is None:
        return "reference"
    multiple = "" if row.multiple is None else f", {row.multiple:.1f}x floor"
    return f"{_pct(row.effect)}{multiple}: {row.verdict}"


def arms_over_boots_table(s: SweepSummary) -> Table | None:
    """Per arm: each metric as 'mean (boot 1 / boot 2 ...)' and, under it, the verdict against
    the first arm; the floor of each metric in the notes."""
    points, verdicts = s.boots, s.boot_floor
    if not points:
        return None
    metrics = metric_names(p.values for p in points)
    arms = list(dict.fromkeys(p.arm for p in sorted(points, key=lambda p: p.order)))
    by = {(r.metric, r.arm): r for r in verdicts}
    rows = []
    for arm in arms:
        mine = sorted((p for p in points if p.arm == arm), key=lambda p: p.boot)
        measured = [p.values for p in mine if p.values]
        cells = [f"{arm}", f"{len(measured)}/{len(mine)}"]
        for m in metrics:
            values = [v.get(m) for v in measured]
            present = [v for v in values if v is not None]
            mean = sum(present) / len(present) if present else None
            each = " / ".join(_fmt(m, v) for v in values)
            cells.append(f"{_fmt(m, mean)} ({each})" if len(values) > 1 else _fmt(m, mean))
            cells.append(_verdict_cell(by.get((m, arm))))
        rows.append(tuple(cells))
    columns = ["arm", "boots measured"]
    for m in metrics:
        columns += [metric_label(m), "vs first arm"]
    floors = {r.metric: r.floor for r in verdicts}
    notes = [
        "each cell: mean over measured boots (each boot's value in run order)",
        "floor = largest (max-min)/mean between boots of one arm; stands above 2x the floor",
    ] + [
        f"floor of {metric_label(m)}: " + (DASH if f is None else f"{100 * f:.3f}%")
        for m, f in floors.items()
    ]
    return Table(
        "Arms over boots, with the boot-floor verdict", tuple(columns), tuple(rows), tuple(notes)
    )


def boots_table(s: SweepSummary) -> Table | None:
    """The boots in run order: arm, boot number, attempts, status."""
    points = s.boots
    if not points:
        return None
    rows = tuple(
        (str(p.order), p.arm, str(p.boot), str(p.attempts), p.status)
        for p in sorted(points, key=lambda p: (p.order, p.arm))
    )
    return Table(
        "Boots in run order",
        ("order", "arm", "boot", "attempts", "status"),
        rows,
        ("cache_dead: failed the sized cache probe twice (restarted once), not measured",),
        left=frozenset({0, 1, 4}),
    )
