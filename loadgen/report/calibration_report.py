"""The calibration's report: the fitted costs, each probe's measured and predicted time with
the error, and calibration.png (predicted against measured, one point per probe)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadgen.analysis.stats import median
from loadgen.report.tables import Table, to_plain
from loadgen.sim.profile_file import load_profile_file

COST_UNITS = {
    "request_overhead_s": ("request overhead", 1e3, "ms"),
    "fixed_s": ("per step", 1e3, "ms"),
    "per_token_s": ("per prefill token", 1e6, "us"),
    "decode_token_s": ("per decode token", 1e6, "us"),
    "decode_ctx_s": ("per decode-context token", 1e9, "ns"),
    "prefill_ctx_s": ("per prefill attention pair", 1e12, "ps"),
    "cached_token_s": ("per cached token restored", 1e6, "us"),
}


def costs_table(costs: dict[str, Any]) -> Table:
    rows = []
    for name, (what, scale, unit) in COST_UNITS.items():
        value = costs.get(name)
        shown = "-" if value is None else f"{value * scale:.4g} {unit}"
        rows.append((name, what, shown))
    return Table("Fitted step costs", ("cost", "what it prices", "value"), tuple(rows),
                 left=frozenset({0, 1}))  # fmt: skip


def fit_table(measurements: list[dict[str, Any]], fit: dict[str, Any]) -> Table:
    rows = tuple(
        (m["probe"], m["kind"], str(m["samples"]), f"{m['measured_s'] * 1e3:.3f}",
         f"{m['predicted_s'] * 1e3:.3f}", f"{m['error']:+.1%}")
        for m in measurements
    )  # fmt: skip
    notes: tuple[str, ...] = (
        "ttft/cached: median TTFT of the probe's streams (client: send to first content chunk); "
        "decode: mean gap between content chunks while all of the probe's streams decoded",
        f"error: predicted / measured - 1; rms {fit['rms_error']:.1%}, max {fit['max_error']:.1%}"
        + (f"; beyond {fit['miss_threshold']:.0%}: {', '.join(fit['misses'])}"
           if fit["misses"] else ""),
    )  # fmt: skip
    if fit.get("unmeasured"):
        notes += (f"not measured (fitted as 0): {', '.join(fit['unmeasured'])}",)
    cols = ("probe", "kind", "samples", "measured ms", "predicted ms", "error")
    return Table("The fit, probe by probe", cols, rows, notes, frozenset({0, 1}))


def witness_table(witness: list[dict[str, Any]]) -> Table:
    rows = tuple(
        (w["probe"], str(w["requests"]), f"{w['client_ttft_mean_s'] * 1e3:.3f}",
         f"{w['server_ttft_mean_s'] * 1e3:.3f}",
         f"{(w['client_ttft_mean_s'] - w['server_ttft_mean_s']) * 1e3:+.3f}")
        for w in witness
    )  # fmt: skip
    cols = ("probe", "requests", "client ms", "server ms", "client - server ms")
    notes = ("mean TTFT over each probe's run, warmup and primes included; server: the rise of "
             "vllm:time_to_first_token_seconds; client - server: the HTTP path and the client, "
             "which the fitted request overhead holds",)  # fmt: skip
    return Table("The server's TTFT histogram beside the client", cols, rows, notes,
                 frozenset({0}))  # fmt: skip


def witness_line(fit: dict[str, Any], costs: dict[str, Any], server: str) -> str:
    """Which timing the fit used, and what the server's own TTFT histogram says of it."""
    witness = fit.get("server_witness") or []
    if not witness:
        return f"{server} has no TTFT histogram on /metrics: the fit rests on client timing alone"
    gap = median([w["client_ttft_mean_s"] - w["server_ttft_mean_s"] for w in witness]) or 0.0
    overhead = costs.get("request_overhead_s") or 0.0
    return (f"fit on client timing; {server}'s TTFT histogram over the same requests: the client "
            f"sees {gap * 1e3:.3f} ms more (median over {len(witness)} probes), the fitted "
            f"request overhead is {overhead * 1e3:.3f} ms")  # fmt: skip


def calibration_text(root: Path) -> str:
    """The report printed at the end of `loadgen calibrate`; writes calibration.png."""
    profile = load_profile_file(root / "profile.yaml")
    doc_costs = profile.costs()
    measurements = [dict(m) for m in profile.measurements]
    head = [
        f"profile {profile.name}: {root / 'profile.yaml'}",
        "facts: " + ", ".join(f"{k} {v}" for k, v in profile.facts.items()),
    ]
    figure = calibration_figure(measurements, profile.name)
    if figure is not None:
        (root / "calibration.png").write_bytes(figure)
    fit = dict(profile.fit)
    parts = [
        "\n".join(head),
        to_plain(costs_table(doc_costs)),
        to_plain(fit_table(measurements, fit)),
    ]
    if fit.get("server_witness"):
        parts.append(to_plain(witness_table(fit["server_witness"])))
    kind = profile.fitted_on.get("server")
    server = str(kind) if kind and kind != "external" else "the server"
    parts.append(witness_line(fit, doc_costs, server))
    return "\n\n".join(parts)


def calibration_figure(measurements: list[dict[str, Any]], name: str) -> bytes | None:
    """Predicted against measured, log-log, one point per probe, coloured by kind."""
    if not measurements:
        return None
    from matplotlib.figure import Figure

    from loadgen.report.plots import png_bytes

    fig = Figure(figsize=(6, 5))
    ax = fig.add_subplot()
    kinds = sorted({m["kind"] for m in measurements})
    for k, kind in enumerate(kinds):
        pts = [(m["measured_s"], m["predicted_s"]) for m in measurements if m["kind"] == kind]
        ax.scatter([x for x, _ in pts], [y for _, y in pts], color=f"C{k}", label=kind)
    values = [v for m in measurements for v in (m["measured_s"], m["predicted_s"]) if v > 0]
    lo, hi = min(values) / 1.5, max(values) * 1.5
    ax.plot([lo, hi], [lo, hi], color="0.5", linewidth=0.8, linestyle="--", label="exact")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured (s)")
    ax.set_ylabel("predicted by the fitted sim (s)")
    ax.set_title(f"{name}: the fit, probe by probe")
    ax.legend(fontsize="small")
    return png_bytes(fig)
