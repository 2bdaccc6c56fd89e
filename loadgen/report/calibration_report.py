"""The calibration's report: the fitted costs, each point's measured and predicted time with
the error, and calibration.png (predicted against measured, one marker per point)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadgen.analysis.calibration import TtftWitness, read_witnesses
from loadgen.analysis.calibration_fit import FitSummary
from loadgen.analysis.inputs import load_run, read_manifest, unplanned_records_json
from loadgen.analysis.stats import median
from loadgen.analysis.summary_types import RecordTally
from loadgen.codec import from_json
from loadgen.report.tables import Table, to_plain
from loadgen.report.text import lost_lines
from loadgen.sim.profile_file import FitRow, load_profile_file

CALIBRATION_PNG = "calibration.png"
COST_UNITS = {
    "request_overhead_s": ("request overhead", 1e3, "ms"),
    "fixed_s": ("per step", 1e3, "ms"),
    "per_token_s": ("per prefill token", 1e6, "us"),
    "decode_token_s": ("per decode token", 1e6, "us"),
    "decode_ctx_s": ("per decode-context token", 1e9, "ns"),
    "prefill_ctx_s": ("per prefill attention pair", 1e12, "ps"),
    "cached_token_s": ("per cached token restored", 1e6, "us"),
}


def costs_table(costs: dict[str, Any], unseparated: Sequence[str] = ()) -> Table:
    """The fitted costs, each the points could not price apart marked so: a calibration with
    no prefill point printed per_token_s 0 as a fitted figure, beside an rms of 0.0%."""
    rows = []
    for name, (what, scale, unit) in COST_UNITS.items():
        value = costs.get(name)
        shown = "-" if value is None else f"{value * scale:.4g} {unit}"
        rows.append((name, what, shown + (" (not separated)" if name in unseparated else "")))
    notes: tuple[str, ...] = ()
    if unseparated:
        notes = (f"not separated: {', '.join(unseparated)}: no point told these apart from the "
                 "others; their values are the fit's split, not measurements",)  # fmt: skip
    return Table("Fitted step costs", ("cost", "what it prices", "value"), tuple(rows), notes,
                 left=frozenset({0, 1}))  # fmt: skip


def fit_table(rows: Sequence[FitRow], fit: FitSummary) -> Table:
    cells = tuple(
        (r.point, r.kind, str(r.samples), f"{r.measured_s * 1e3:.3f}",
         f"{r.predicted_s * 1e3:.3f}", f"{r.error:+.1%}")
        for r in rows
    )  # fmt: skip
    notes: tuple[str, ...] = (
        "ttft/cached: median TTFT of the point's streams (client: send to first content chunk); "
        "decode: mean gap between content chunks while all of the point's streams decoded",
        f"error: predicted / measured - 1; rms {fit.rms_error:.1%}, max {fit.max_error:.1%}"
        + (f"; beyond {fit.miss_threshold:.0%}: {', '.join(fit.misses)}" if fit.misses else ""),
    )  # fmt: skip
    if fit.unmeasured:
        notes += (f"not measured (fitted as 0): {', '.join(fit.unmeasured)}",)
    cols = ("point", "kind", "samples", "measured ms", "predicted ms", "error")
    return Table("The fit, point by point", cols, cells, notes, frozenset({0, 1}))


def witness_table(witnesses: Sequence[TtftWitness]) -> Table:
    rows = tuple(
        (w.point, str(w.requests), f"{w.client_ttft_s * 1e3:.3f}",
         f"{w.server_ttft_s * 1e3:.3f}", f"{w.gap_s * 1e3:+.3f}")
        for w in witnesses
    )  # fmt: skip
    cols = ("point", "requests", "client ms", "server ms", "client - server ms")
    notes = ("mean TTFT over each point's run, warmup and primes included; server: the rise of "
             "vllm:time_to_first_token_seconds; client - server: the HTTP path and the client, "
             "which the fitted request overhead holds",)  # fmt: skip
    return Table("The server's TTFT histogram beside the client", cols, rows, notes,
                 frozenset({0}))  # fmt: skip


def witness_line(witnesses: Sequence[TtftWitness], overhead_s: float, server: str) -> str:
    """Which timing the fit used, and what the server's own TTFT histogram says of it."""
    if not witnesses:
        return f"{server} has no TTFT histogram on /metrics: the fit rests on client timing alone"
    gap = median([w.gap_s for w in witnesses]) or 0.0
    return (f"fit on client timing; {server}'s TTFT histogram over the same requests: the client "
            f"sees {gap * 1e3:.3f} ms more (median over {len(witnesses)} points), the fitted "
            f"request overhead is {overhead_s * 1e3:.3f} ms")  # fmt: skip


def calibration_report(root: Path) -> tuple[str, bytes | None]:
    """A calibration's report.txt and calibration.png, from the fit its profile.yaml holds."""
    profile = load_profile_file(root / "profile.yaml")
    rows = profile.measurements
    witnesses = read_witnesses(profile.fit)
    head = [
        f"profile {profile.name}: {root / 'profile.yaml'}",
        "facts: " + ", ".join(f"{k} {v}" for k, v in profile.facts.items()),
        *_lost_lines(root),
    ]
    parts = [
        "\n".join(head),
        to_plain(costs_table(profile.costs(), profile.unseparated)),
        to_plain(fit_table(rows, from_json(FitSummary, profile.fit))),
    ]
    if witnesses:
        parts.append(to_plain(witness_table(witnesses)))
    kind = profile.fitted_on.get("server")
    server = str(kind) if kind and kind != "external" else "the server"
    parts.append(witness_line(witnesses, profile.request_overhead_s, server))
    return "\n\n".join(parts) + "\n", calibration_figure(rows, profile.name)


def _lost_lines(root: Path) -> list[str]:
    """Each point's lines that could not be read: a refit over a torn record fitted the rest
    and said nothing (decode-b2 went from 360 samples to 239)."""
    out = []
    for run in read_manifest(root).runs or ():
        rec = from_json(RecordTally, unplanned_records_json(load_run(root / run["dir"])))
        out += [f"{line} (point {run['dir']}: fitted on the rest)" for line in lost_lines(rec)]
    return out


def calibration_figure(rows: Sequence[FitRow], name: str) -> bytes | None:
    """Predicted against measured, log-log, one marker per point, coloured by kind."""
    if not rows:
        return None
    from matplotlib.figure import Figure

    from loadgen.report.plots import png_bytes

    fig = Figure(figsize=(6, 5))
    ax = fig.add_subplot()
    kinds = sorted({r.kind for r in rows})
    for k, kind in enumerate(kinds):
        pts = [(r.measured_s, r.predicted_s) for r in rows if r.kind == kind]
        ax.scatter([x for x, _ in pts], [y for _, y in pts], color=f"C{k}", label=kind)
    values = [v for r in rows for v in (r.measured_s, r.predicted_s) if v > 0]
    lo, hi = min(values) / 1.5, max(values) * 1.5
    ax.plot([lo, hi], [lo, hi], color="0.5", linewidth=0.8, linestyle="--", label="exact")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured (s)")
    ax.set_ylabel("predicted by the fitted sim (s)")
    ax.set_title(f"{name}: the fit, point by point")
    ax.legend(fontsize="small")
    return png_bytes(fig)
