"""The fit of the sim's step costs to a calibration's measurements (analysis/calibration.py
gives each its design row): a non-negative least squares on relative error, so a 2 ms TTFT
counts as much as a 20 s one, with each measurement's prediction and signed error.

Some servers take no step faster than a floor: their decode steps do not grow with batch or
context below it. Where the data say so, the model
gains one parameter, min_step_s, and a step costs max(min_step_s, its linear cost); the floor
is kept only where it cuts the rms error materially (FLOOR_GAIN).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from loadgen.analysis.calibration import COSTS, Measurement, six_figures
from loadgen.sim.profile_file import FitRow

# A point whose prediction misses its measurement by more than this is named in the fit.
MISS = 0.10


@dataclass(frozen=True, slots=True)
class FitSummary:
    """A profile's `fit` block: the method, the error over every point, the points it missed
    by more than `miss_threshold`, the costs no point measured and the step floor."""

    method: str | None
    measurements: int | None
    rms_error: float
    max_error: float
    misses: tuple[str, ...]
    miss_threshold: float
    # A hand-written profile may leave out what no table needs; the error summary it must have.
    unmeasured: tuple[str, ...] = ()
    min_step_s: float | None = None


@dataclass(frozen=True, slots=True)
class Fit:
    """Fitted costs (s) with each measurement's prediction and signed relative error."""

    costs: Mapping[str, float]
    rows: tuple[FitRow, ...]
    # Costs no point measured (their column is all zeros): fitted as 0.
    unmeasured: tuple[str, ...]
    # The floor under every step, where the data asked for one (None: the linear model).
    min_step_s: float | None = None

    def summary(self) -> FitSummary:
        errors = [abs(r.error) for r in self.rows]
        return FitSummary(
            method="non-negative least squares on relative error",
            measurements=len(self.rows),
            rms_error=round(math.sqrt(sum(e * e for e in errors) / len(errors)), 4),
            max_error=round(max(errors), 4),
            misses=tuple(r.point for r in self.rows if abs(r.error) > MISS),
            miss_threshold=MISS,
            unmeasured=self.unmeasured,
            min_step_s=self.min_step_s,
        )


def fit_costs(measurements: Sequence[Measurement]) -> Fit:
    """The costs that minimise the squared relative error of every measurement: the linear
    model, or, where it fits materially better, the model with a floor under every step
    (min_step_s; module docstring)."""
    if not measurements:
        raise ValueError("no point produced a measurement")
    linear = _solve(measurements, None)
    best, best_rms = linear, _rms(measurements, *linear)
    for floor in _floor_candidates(measurements):
        theta, _ = _solve(measurements, floor)
        rms = _rms(measurements, theta, floor)
        if rms < best_rms:
            best, best_rms = (theta, floor), rms
    if best[1] is not None and best_rms > FLOOR_GAIN * _rms(measurements, *linear):
        best = linear  # a floor that barely helps is a parameter the data do not need
    return _fit(measurements, *best)


# A floor is kept only where it cuts the rms error to this share of the linear model's or less.
FLOOR_GAIN = 0.8
FLOOR_ROUNDS = 4
# A decode step within this share of a candidate floor is taken as held by it, at first.
FLOOR_HELD = 1.05


def _floor_candidates(measurements: Sequence[Measurement]) -> list[float]:
    """Floors worth trying: the decode steps measured (a floor shows as decode steps that do not
    grow with batch or context), each and halfway between neighbours."""
    values = sorted({m.value_s for m in measurements if m.kind == "decode"})
    return values + [(a + b) / 2 for a, b in pairwise(values)]


def _split(m: Measurement, theta: np.ndarray, floor: float | None) -> tuple[np.ndarray, int]:
    """m's coefficients over the steps above the floor (with the request overhead), and how
    many of its steps the floor holds."""
    steps = m.steps or (m.row,)
    if floor is None:
        return np.array([m.row[c] for c in COSTS], dtype=float), 0
    row = np.zeros(len(COSTS))
    row[0] = m.row["request_overhead_s"]
    held = 0
    for step in steps:
        coeffs = np.array([step[c] for c in COSTS], dtype=float)
        coeffs[0] = 0.0  # the overhead is once per request, not per step
        if coeffs @ theta < floor:
            held += 1
        else:
            row += coeffs
    return row, held


def _solve(
    measurements: Sequence[Measurement], floor: float | None
) -> tuple[np.ndarray, float | None]:
    """Non-negative least squares on relative error; with a floor, the steps it holds are
    moved to the right-hand side and the split refined a few rounds."""
    from scipy.optimize import nnls

    y = np.array([m.value_s for m in measurements], dtype=float)
    theta = np.zeros(len(COSTS))
    for round_ in range(FLOOR_ROUNDS if floor is not None else 1):
        # The first split is the floor's hypothesis, that it holds the decode steps at or
        # below it and no other step; later rounds split by what the costs fitted so far
        # predict. (Holding every decode step left the batch slope at 0 for good: a sim whose
        # decode step was max(8 ms, 3 ms + 1.5 ms x batch) fitted 0 and missed batch 8 by 50%.)
        split = [
            (_split(m, theta, None)[0] * [1, *[0] * (len(COSTS) - 1)], 1)
            if floor is not None
            and round_ == 0
            and m.kind == "decode"
            and m.value_s <= floor * FLOOR_HELD
            else _split(m, theta, floor if round_ else None)
            for m in measurements
        ]
        x = np.array([row for row, _ in split])
        rhs = y - np.array([held for _, held in split]) * (floor or 0.0)
        a = x / y[:, None]
        scale = np.abs(a).max(axis=0)
        scale[scale == 0] = 1.0
        solution, _ = nnls(a / scale, rhs / y)
        theta = solution / scale
    return theta, floor


def _predict(m: Measurement, theta: np.ndarray, floor: float | None) -> float:
    if floor is None:
        return float(np.array([m.row[c] for c in COSTS]) @ theta)
    total = m.row["request_overhead_s"] * theta[0]
    for step in m.steps or (m.row,):
        coeffs = np.array([step[c] for c in COSTS], dtype=float)
        coeffs[0] = 0.0
        total += max(floor, float(coeffs @ theta))
    return float(total)


def _rms(measurements: Sequence[Measurement], theta: np.ndarray, floor: float | None) -> float:
    errors = [_predict(m, theta, floor) / m.value_s - 1 for m in measurements]
    return math.sqrt(sum(e * e for e in errors) / len(errors))


def _fit(measurements: Sequence[Measurement], theta: np.ndarray, floor: float | None) -> Fit:
    rows = tuple(
        FitRow(m.point, m.kind, m.samples, six_figures(m.value_s), six_figures(p),
               round(p / m.value_s - 1, 4), dict(m.basis))
        for m in measurements
        for p in (_predict(m, theta, floor),)
    )  # fmt: skip
    costs = {c: six_figures(float(v)) for c, v in zip(COSTS, theta, strict=True)}
    unmeasured = tuple(c for c in COSTS if not any(m.row[c] for m in measurements))
    return Fit(costs, rows, unmeasured, None if floor is None else six_figures(floor))


def costs_measured(measurements: Sequence[Measurement]) -> tuple[str, ...]:
    """The costs some of `measurements` have a coefficient for (one boot's share of a fit)."""
    return tuple(c for c in COSTS if any(m.row[c] for m in measurements))


# Two measured values of a knob only separate the costs it moves when they differ this much.
SPREAD = 1.5


def unseparated(measurements: Sequence[Measurement], floor: float | None) -> tuple[str, ...]:
    """The costs these measurements cannot tell apart from another (or did not measure): a
    fit puts a number on each, but a flag that moves one of them alone is not predicted.

    - fixed_s, per_token_s: prefills at one budget take steps in proportion to their tokens,
      so a prefill step's own cost and a prefill token's are one slope; a second budget (a
      second boot) prices the same tokens in other step counts.
    - decode_token_s: decode steps at one batch size cannot split the step from its tokens.
    - decode_ctx_s: decode steps at one context depth cannot price the depth.
    - prefill_ctx_s: prefills of one length cannot split attention work from tokens.
    Decode steps the fitted `floor` holds price none of their terms.
    """
    prefills = [m for m in measurements if m.kind != "decode"]
    decodes = [m for m in measurements if m.kind == "decode"
               and (floor is None or m.value_s > floor * FLOOR_HELD)]  # fmt: skip
    budgets = {max(s["per_token_s"] for s in m.steps) for m in prefills if len(m.steps) > 1}
    out = set(COSTS) - set(costs_measured(measurements))
    if len(budgets) < 2:
        out |= {"fixed_s", "per_token_s"}
    if not _spread([m.row["decode_token_s"] for m in decodes]):
        out.add("decode_token_s")
    if not _spread([m.basis.get("context_tokens", 0.0) for m in decodes]):
        out.add("decode_ctx_s")
    if not _spread([m.row["per_token_s"] for m in prefills]):
        out.add("prefill_ctx_s")
    return tuple(c for c in COSTS if c in out)


def _spread(values: Sequence[float]) -> bool:
    positive = [v for v in values if v > 0]
    return bool(positive) and max(positive) >= SPREAD * min(positive)
