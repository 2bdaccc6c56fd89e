"""The drift verdict on synthetic requests whose truth is known."""

from __future__ import annotations

import math

import numpy as np
import orjson
import pytest

from loadgen.analysis.drift import (
    MIN_REQUESTS,
    THRESHOLD,
    DriftPoint,
    DriftVerdict,
    change,
    drift_verdict,
    fit_trend,
    needed_requests,
)
from loadgen.codec import from_json, to_json


def test_the_seeds_thirds_arithmetic() -> None:
    assert round(change(84.0, 59.3) * 100, 1) == -29.4
    assert round(change(83.8, 80.0) * 100, 1) == -4.5


def points(n: int, *, slope_per_h: float, span_h: float, noise: float, seed: int = 1,
           context=lambda t, rng: 1000.0,
           per_token=lambda ctx: 0.01) -> list[DriftPoint]:  # fmt: skip
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        t = span_h * i / (n - 1)
        ctx = context(t, rng)
        rate = math.exp(slope_per_h * t) / per_token(ctx) * math.exp(rng.normal(0, noise))
        out.append(DriftPoint(t_h=t, rate=rate, context=ctx))
    return out


def test_a_noise_free_decay_is_fitted_exactly() -> None:
    pts = points(50, slope_per_h=-0.3, span_h=1 / 6, noise=0.0)
    trend = fit_trend(pts, with_context=True, seed=0)
    assert trend is not None
    assert trend.effect == pytest.approx(math.expm1(-0.3 / 6), rel=1e-9)
    assert trend.lo == pytest.approx(trend.effect, rel=1e-6)
    assert trend.hi == pytest.approx(trend.effect, rel=1e-6)
    assert trend.per_hour == pytest.approx(math.expm1(-0.3), rel=1e-9)


def test_a_steady_decay_is_drift() -> None:
    v = drift_verdict(points(200, slope_per_h=-0.3, span_h=1 / 6, noise=0.01))
    assert v.verdict == "drift"
    assert v.adjusted.hi < -THRESHOLD
    assert v.case == "beyond"


def test_a_flat_rate_is_no_drift() -> None:
    v = drift_verdict(points(200, slope_per_h=0.0, span_h=1.0, noise=0.02))
    assert v.verdict == "no drift" and v.case == "inside"
    assert -THRESHOLD < v.adjusted.lo < 0 < v.adjusted.hi < THRESHOLD


def growing_context(t: float, rng: np.random.Generator) -> float:
    # Mean context grows 10k -> 90k over the hour, each request scattered around it.
    return (10_000 + 80_000 * t) * math.exp(rng.normal(0, 0.4))


def test_growing_context_without_drift_is_a_changed_mix() -> None:
    pts = points(300, slope_per_h=0.0, span_h=1.0, noise=0.02, context=growing_context,
                 per_token=lambda ctx: (1 + ctx / 20_000) * 0.01)  # fmt: skip
    v = drift_verdict(pts, context_change=2.5)
    assert v.raw.effect < -THRESHOLD
    assert (v.verdict, v.case, v.context_change) == ("mix changed", "traffic", 2.5)


def scattered_context(t: float, rng: np.random.Generator) -> float:
    # Contexts scattered 20k x e^N(0, 1) all hour long: the traffic never changes.
    return 20_000 * math.exp(rng.normal(0, 1.0))


def test_a_raw_move_inside_its_own_noise_is_not_a_changed_mix() -> None:
    # Seed 7 draws a raw point of -30% whose CI spans zero; the mix did not change, and a soak
    # of unchanged agent turns was told "the traffic changed, not the engine".
    pts = points(60, slope_per_h=0.0, span_h=1.0, noise=0.02, seed=7, context=scattered_context,
                 per_token=lambda ctx: (1 + ctx / 5_000) * 0.01)  # fmt: skip
    v = drift_verdict(pts)
    assert v.raw.effect < -THRESHOLD and v.raw.lo < 0 < v.raw.hi
    assert (v.verdict, v.case) == ("no drift", "inside")


def test_drift_under_growing_context_is_still_drift() -> None:
    pts = points(300, slope_per_h=-0.3, span_h=1.0, noise=0.02, context=growing_context,
                 per_token=lambda ctx: (1 + ctx / 20_000) * 0.01)  # fmt: skip
    v = drift_verdict(pts)
    assert v.verdict == "drift"
    assert v.adjusted.effect == pytest.approx(math.expm1(-0.3), abs=0.03)


def test_too_few_requests_is_unresolved() -> None:
    v = drift_verdict(points(MIN_REQUESTS - 1, slope_per_h=-0.3, span_h=1, noise=0.0))
    assert (v.verdict, v.case, v.needed_n) == ("unresolved", "few_requests", MIN_REQUESTS)


def test_a_wide_ci_is_unresolved_and_says_how_many_more() -> None:
    v = drift_verdict(points(20, slope_per_h=0.0, span_h=0.05, noise=0.2))
    assert (v.verdict, v.case) == ("unresolved", "straddles")
    assert v.needed_n > 20


def test_needed_requests_scales_as_the_square_of_the_width() -> None:
    from loadgen.analysis.drift import Trend

    # Half-width 0.5, effect 0 and a 0.25 threshold: room 0.25, so (0.5/0.25)^2 = 4x.
    assert needed_requests(100, Trend(0.0, -0.5, 0.5, 0.0), 0.25) == 400


def test_acceptance_that_explains_a_drop_is_a_changed_mix() -> None:
    pts = points(200, slope_per_h=-0.3, span_h=1 / 6, noise=0.01)
    v = drift_verdict(pts, acceptance_change=-0.04)
    assert (v.verdict, v.case, v.acceptance_change) == ("mix changed", "acceptance", -0.04)
    # Acceptance that rose cannot explain a drop: the drop stays drift.
    v = drift_verdict(pts, acceptance_change=0.04)
    assert (v.verdict, v.case) == ("drift", "beyond")


def test_time_that_cannot_be_told_from_context_is_unresolved() -> None:
    v = drift_verdict([DriftPoint(0.0, 10.0 + i, 100.0) for i in range(20)])
    assert (v.verdict, v.case, v.adjusted, v.raw) == ("unresolved", "confounded", None, None)


def test_a_verdict_reads_back_from_its_json() -> None:
    v = drift_verdict(points(40, slope_per_h=-0.3, span_h=1, noise=0.05), context_change=0.2,
                      seed=3)  # fmt: skip
    assert from_json(DriftVerdict, orjson.loads(orjson.dumps(to_json(v)))) == v
    assert to_json(v)["bootstrap"] == {"resamples": 2000, "seed": 3, "ci_level": 0.95}
