"""Energy per arm from telemetry.jsonl: joules over the measured window, per output token.

The energy counter (NVML's total energy, DCGM's TOTAL_ENERGY_CONSUMPTION) is read at the
window's edges by linear interpolation between the samples around them, so a counter rising
300 J/s over a 2.5 s window gives exactly 750 J whatever the poll grid. Where no GPU gives the
counter, power is integrated (trapezoids) over the same window instead, and `energy_method`
says which. Output tokens are the measured streams' completion_tokens (`token_sources` says
where those came from); prompt tokens their usage prompt_tokens. Joules are given per output,
per prompt and per total (prompt + output) token: on a prefill-heavy load the GPU's work is in
the prompt (whale_c4 on an H200, 85k prompt tokens per 1k output, read 4.58 J per output
token), and per output token alone reads as a costly decode.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, cast

from loadgen.codec import from_json
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


@dataclass(frozen=True, slots=True)
class Energy:
    """summary.json's `energy`: the GPUs' joules over the measured window (EnergyNote where
    there are none), with the figures made of them."""

    source: str | None
    available: Literal[True] = True
    gpus: int = 0
    energy_method: str = ""  # "energy_counter" | "power_integrated"
    window_s: float = 0.0
    energy_j: float = 0.0
    output_tokens: int = 0
    token_sources: tuple[str, ...] = ()
    peak_sm_clock_mhz: float | None = None
    throttle_mask: int = 0
    prompt_tokens: int = 0  # usage prompt_tokens of the measured streams that reported it
    prompt_tokens_missing: int = 0  # measured streams without it: per prompt token is unknown
    streams: int = 0
    json_derived: ClassVar[tuple[str, ...]] = (
        "j_per_output_token", "mean_power_w", "throttle_reasons", "j_per_prompt_token",
        "j_per_total_token",
    )  # fmt: skip

    @property
    def j_per_output_token(self) -> float | None:
        return self.energy_j / self.output_tokens if self.output_tokens else None

    @property
    def j_per_prompt_token(self) -> float | None:
        if self.prompt_tokens_missing or not self.prompt_tokens:
            return None
        return self.energy_j / self.prompt_tokens

    @property
    def j_per_total_token(self) -> float | None:
        """Over prompt + output tokens; None while any stream's prompt count is unknown."""
        total = self.prompt_tokens + self.output_tokens
        return None if self.prompt_tokens_missing or not total else self.energy_j / total

    @property
    def mean_power_w(self) -> float | None:
        """All GPUs together: the window's energy over its length."""
        return self.energy_j / self.window_s if self.window_s > 0 else None

    @property
    def throttle_reasons(self) -> list[str]:
        return throttle_names(self.throttle_mask)


@dataclass(frozen=True, slots=True)
class EnergyNote:
    """summary.json's `energy` where the run sampled its GPUs but has no joules to show: why."""

    source: str | None
    available: Literal[False]
    note: str


def read_energy(block: Mapping[str, Any] | None) -> Energy | EnergyNote | None:
    """A run's (or a sweep arm's) `energy` block; None where it had no telemetry."""
    either: Any = Energy | EnergyNote  # the codec tells them apart by `available`
    return None if block is None else cast(Energy | EnergyNote, from_json(either, block))


def energy_section(
    telemetry: Iterable[dict[str, Any]], measure: list[StreamRecord], span: tuple[int, int] | None
) -> Energy | EnergyNote | None:
    """The measured window's energy: None when the run has no telemetry samples."""
    lines = sorted((t for t in telemetry if t.get("gpus")), key=lambda t: t["t_ns"])
    if not lines:
        return None
    source = lines[0].get("source")
    if span is None:
        return EnergyNote(source, False, "no measured streams")
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
        return EnergyNote(source, False, "no energy counter or power")
    inside = [ln for ln in lines if a <= ln["t_ns"] <= b]
    sm = [g["sm_clock_mhz"] for ln in inside for g in ln["gpus"] if "sm_clock_mhz" in g]
    mask = 0
    for ln in inside:
        for g in ln["gpus"]:
            mask |= int(g.get("throttle", 0))
    return Energy(
        source, True, gpus=len(per_gpu), energy_method=method, window_s=(b - a) / NS,
        energy_j=joules, output_tokens=sum(r.completion_tokens for r in measure),
        token_sources=tuple(sorted({r.token_source for r in measure})),
        peak_sm_clock_mhz=max(sm) if sm else None, throttle_mask=mask,
        prompt_tokens=sum(r.prompt_tokens or 0 for r in measure),
        prompt_tokens_missing=sum(r.prompt_tokens is None for r in measure),
        streams=len(measure),
    )  # fmt: skip


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
