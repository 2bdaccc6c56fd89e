"""Energy per arm from telemetry.jsonl: joules over the measured window, per output token.

The energy counter (NVML's total energy, DCGM's TOTAL_ENERGY_CONSUMPTION) is read at the
window's edges by linear interpolation between the samples around them, so a counter rising
300 J/s over a 2.5 s window gives exactly 750 J whatever the poll grid. Where no GPU gives the
counter, power is integrated (trapezoids) over the same window instead, and `energy_method`
says which. Output tokens are the measured streams' completion_tokens (`token_sources` says
where those came from).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from loadgen.records import StreamRecord

NS = 1e9
# NVML's clocks event reasons (nvml.h nvmlClocksEventReason*), also DCGM's bitmask.
THROTTLE_BITS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}

Points = list[tuple[int, float]]


def energy_section(
    telemetry: Iterable[dict[str, Any]], measure: list[StreamRecord], span: tuple[int, int] | None
) -> dict[str, Any] | None:
    """summary.json's "energy": None when the run has no telemetry samples."""
    lines = sorted((t for t in telemetry if t.get("gpus")), key=lambda t: t["t_ns"])
    if not lines:
        return None
    source = lines[0].get("source")
    if span is None:
        return {"source": source, "available": False, "note": "no measured streams"}
    a, b = span
    per_gpu = _series(lines)
    counter = {i: s["energy_j"] for i, s in per_gpu.items() if len(s.get("energy_j", [])) >= 2}
    power = {i: s["power_w"] for i, s in per_gpu.items() if len(s.get("power_w", [])) >= 2}
    if counter:
        method = "energy_counter"
        joules = sum(_interp(p, b) - _interp(p, a) for p in counter.values())
    elif power:
        method = "power_integrated"
        joules = sum(_integral(p, a, b) for p in power.values())
    else:
        return {"source": source, "available": False, "note": "no energy counter or power"}
    tokens = sum(r.completion_tokens for r in measure)
    inside = [ln for ln in lines if a <= ln["t_ns"] <= b]
    sm = [g["sm_clock_mhz"] for ln in inside for g in ln["gpus"] if "sm_clock_mhz" in g]
    mask = 0
    for ln in inside:
        for g in ln["gpus"]:
            mask |= int(g.get("throttle", 0))
    return {
        "source": source,
        "available": True,
        "gpus": len(per_gpu),
        "energy_method": method,
        "window_s": (b - a) / NS,
        "energy_j": joules,
        "output_tokens": tokens,
        "token_sources": sorted({r.token_source for r in measure}),
        "j_per_output_token": joules / tokens if tokens else None,
        # All GPUs together: the window's energy over its length.
        "mean_power_w": joules / ((b - a) / NS) if b > a else None,
        "peak_sm_clock_mhz": max(sm) if sm else None,
        "throttle_mask": mask,
        "throttle_reasons": throttle_names(mask),
    }


def throttle_names(mask: int) -> list[str]:
    """The reasons a throttle bitmask holds, in NVML's order."""
    return [name for bit, name in THROTTLE_BITS.items() if mask & bit]


def _series(lines: list[dict[str, Any]]) -> dict[int, dict[str, Points]]:
    out: dict[int, dict[str, Points]] = {}
    for ln in lines:
        for g in ln["gpus"]:
            fields = out.setdefault(int(g.get("index", 0)), {})
            for f in ("energy_j", "power_w"):
                if f in g:
                    fields.setdefault(f, []).append((ln["t_ns"], float(g[f])))
    return out


def _interp(points: Points, t: int) -> float:
    """The piecewise-linear value at t, held flat beyond the first and last samples."""
    if t <= points[0][0]:
        return points[0][1]
    for (t0, v0), (t1, v1) in itertools.pairwise(points):
        if t <= t1:
            return v0 + (v1 - v0) * (t - t0) / (t1 - t0) if t1 > t0 else v1
    return points[-1][1]


def _integral(points: Points, a: int, b: int) -> float:
    """Joules: the integral of the piecewise-linear power (W) over [a, b] ns."""
    ts = sorted({a, b} | {t for t, _ in points if a < t < b})
    return sum(
        (_interp(points, t0) + _interp(points, t1)) / 2 * (t1 - t0) / NS
        for t0, t1 in itertools.pairwise(ts)
    )
