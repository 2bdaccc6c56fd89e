"""The fidelity report: measured against predicted, figure by figure, the verdicts side by side,
and fidelity.png (predicted against measured, one point per figure)."""

from __future__ import annotations

from collections.abc import Mapping

from loadgen.analysis.fidelity import Fidelity
from loadgen.analysis.summary_types import RunSummary
from loadgen.report.tables import DASH, Table, to_plain

FIDELITY_PNG = "fidelity.png"


def _value(v: float | None, unit: str) -> str:
    if v is None:
        return DASH
    return f"{v:.0f}" if unit == "tok/s" else f"{v:.3f}"


def measured_side(run: RunSummary) -> str:
    """What the measured side ran on: the built-in sim is never called a server."""
    kind = run.target.kind
    where = {"sim": "the built-in sim", "external": f"the server at {run.target.url}"}.get(
        kind or "", f"{kind}, launched by loadgen"
    )
    return f"{where} ({run.clock} clock, over HTTP)"


def figures_table(f: Fidelity, measured: str) -> Table:
    rows = []
    for r in f.rows:
        mark = DASH if r.within is None else ("yes" if r.within else "NO")
        err = DASH if r.error is None else f"{r.error:+.1%}"
        rows.append((r.arm, r.group, f"{r.label} ({r.unit})", _value(r.measured, r.unit),
                     _value(r.predicted, r.unit), err, mark))  # fmt: skip
    cols = ("arm", "group", "figure", "measured", "predicted", "error",
            f"within ±{f.tolerance:.0%}")  # fmt: skip
    notes = (
        f"measured: {measured}; predicted: the virtual clock with the profile; error: "
        "predicted / measured - 1",
        "decode-only rate: usage tokens after the first chunk over the time after it (tok/s)",
    )
    return Table("Fidelity: measured against predicted", cols, tuple(rows), notes,
                 frozenset({0, 1, 2}))  # fmt: skip


def verdicts_table(f: Fidelity) -> Table:
    def counts(c: Mapping[str, int]) -> str:
        return ", ".join(f"{k} {v}" for k, v in sorted(c.items())) or DASH

    rows = tuple(
        (v.arm, v.group, counts(v.real), counts(v.virtual), "yes" if v.same else "NO")
        for v in f.verdicts
    )
    cols = ("arm", "group", "real verdicts", "predicted verdicts", "same")
    return Table("Verdicts per group", cols, rows, (), frozenset({0, 1, 2, 3}))


def fidelity_line(f: Fidelity) -> str:
    line = (
        f"fidelity: {f.within} of {f.figures} figures within ±{f.tolerance:.0%}; "
        f"verdicts the same in {f.verdicts_agree} of {len(f.verdicts)} groups"
    )
    if f.unmatched:
        line += f"\n!! no prediction for arm(s) {', '.join(f.unmatched)}: not compared"
    for unlike in f.unlike:
        line += f"\n!! {unlike}: its errors stand on other streams"
    return line


def fidelity_text(f: Fidelity, head: list[str], measured: str) -> str:
    parts = ["\n".join(head), to_plain(figures_table(f, measured)), to_plain(verdicts_table(f)),
             fidelity_line(f)]  # fmt: skip
    return "\n\n".join(parts) + "\n"


def fidelity_figure(f: Fidelity, title: str) -> bytes | None:
    """Predicted against measured, log-log, one marker per figure kind."""
    rows = [r for r in f.rows if r.measured and r.predicted]
    points = [(r.label, r.measured, r.predicted) for r in f.rows if r.measured and r.predicted]
    if not rows:
        return None
    from matplotlib.figure import Figure

    from loadgen.report.plots import png_bytes

    fig = Figure(figsize=(6, 5))
    ax = fig.add_subplot()
    for k, label in enumerate(dict.fromkeys(r.label for r in rows)):
        pts = [(x, y) for name, x, y in points if name == label]
        unit = next(r.unit for r in rows if r.label == label)
        ax.scatter([x for x, _ in pts], [y for _, y in pts], color=f"C{k}",
                   label=f"{label} ({unit})")  # fmt: skip
    values = [v for _, x, y in points for v in (x, y)]
    lo, hi = min(values) / 1.5, max(values) * 1.5
    tol = f.tolerance
    ax.plot([lo, hi], [lo, hi], color="0.4", linewidth=0.8, label="exact")
    ax.fill_between([lo, hi], [lo * (1 - tol), hi * (1 - tol)], [lo * (1 + tol), hi * (1 + tol)],
                    color="0.85", label=f"±{tol:.0%}")  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured on the server")
    ax.set_ylabel("predicted on the virtual clock")
    ax.set_title(title)
    ax.legend(fontsize="small")
    return png_bytes(fig)
