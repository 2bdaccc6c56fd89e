"""The drift verdict of a soak: did decode get slower over the run with context held fixed?

Method (every number in the verdict comes from here):
- One point per completed request: its token-true decode rate (rates.decode_tok_s), its time
  (decode midpoint, hours from the soak's start) and its mean decode context
  (prompt + completion / 2 tokens). Points in windows where the client fell behind are left out
  before this module sees them.
- Adjusted trend: ordinary least squares of log(rate) on [1, t, log(context), log(context)^2]
  (the square lets the fit follow a per-token time that is linear in context, a + b * context,
  which is not a straight line in log(context); context terms are dropped when the requests do
  not have enough distinct contexts to carry them). The time coefficient b, times the soak's
  span, is the change over the soak at fixed context: effect = exp(b * span) - 1. The raw trend
  is the same fit without the context term: what the rate did, whatever the traffic did.
- Confidence: a moving-block bootstrap (blocks of ceil(n ** (1/3)) consecutive requests, so
  slow wander between neighbours is resampled together instead of being read as independent
  noise), BOOTSTRAP_RESAMPLES resamples from a fixed seed, 95% percentile interval.
- Verdicts, with THRESHOLD (a fraction of the rate, over the soak):
  `drift`      the whole CI lies beyond -THRESHOLD (or +THRESHOLD: the rate rose, also named),
               unless the speculative acceptance moved enough to explain it (`mix changed`);
  `no drift`   the whole CI lies inside +-THRESHOLD and the raw rate's CI does not lie beyond it;
  `mix changed` the raw rate's whole CI lies beyond THRESHOLD but a control explains it: with
               context held fixed the CI is inside +-THRESHOLD (context explained it), or acceptance
               predicts at least half of an adjusted drift;
  `unresolved` fewer than MIN_REQUESTS points, or a CI that straddles the threshold; it says
               how many requests in all would resolve it, from the CI half-width shrinking as
               1/sqrt(n) at the same effect (an estimate, not a promise).
The threshold is over the soak, not per hour: a 10-minute soak can only see what changed in 10
minutes (30 %/h of step time is ~ -4.6 % of rate in 10 min); the per-hour rate is reported
beside it. 2.5 % sits between that and no change, with room for the ~+-1.2 % CI that a
10-minute one-slot soak on the sim's rtx4090 profile with one speculative token gets from
acceptance noise alone (tests/sim/test_soak_sim_core.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from loadgen.codec import json_field

THRESHOLD = 0.025
MIN_REQUESTS = 12
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20_040
CI_LEVEL = 0.95
# Acceptance "explains" an adjusted change when its predicted rate change is this share of it.
EXPLAINED_SHARE = 0.5


@dataclass(frozen=True, slots=True)
class DriftPoint:
    t_h: float  # hours since the soak's start
    rate: float  # tokens/s, token-true decode rate of one request
    context: float  # tokens


@dataclass(frozen=True, slots=True)
class Trend:
    """A fitted change over the soak: `effect` (fraction, exp(b * span) - 1) and its CI."""

    effect: float
    lo: float = json_field(key="ci_lo")
    hi: float = json_field(key="ci_hi")
    per_hour: float = json_field()


@dataclass(frozen=True, slots=True)
class Bootstrap:
    """How the CI was drawn: moving-block resamples from a fixed seed, at a CI level."""

    resamples: int = BOOTSTRAP_RESAMPLES
    seed: int = BOOTSTRAP_SEED
    ci_level: float = CI_LEVEL


# Why a verdict is what it is (the report says it in words):
#   few_requests  fewer than MIN_REQUESTS points            -> unresolved
#   confounded    time and context cannot be told apart     -> unresolved
#   beyond        the adjusted CI lies beyond the threshold -> drift
#   acceptance    ... but speculative acceptance explains it -> mix changed
#   traffic       the raw CI lies beyond, the adjusted CI inside -> mix changed
#   inside        both inside                               -> no drift
#   straddles     the adjusted CI straddles the threshold   -> unresolved
Case = Literal["few_requests", "confounded", "beyond", "acceptance", "traffic", "inside",
               "straddles"]  # fmt: skip


@dataclass(frozen=True, slots=True)
class DriftVerdict:
    """The drift verdict and what decided it. `acceptance_change` is the rate change the
    speculative acceptance alone predicts, `context_change` the mean context's change, first
    window to last (None where not measured)."""

    verdict: str
    case: Case
    n: int
    span_h: float
    threshold: float
    adjusted: Trend | None
    raw: Trend | None
    needed_n: int | None = None
    acceptance_change: float | None = None
    context_change: float | None = None
    bootstrap: Bootstrap = Bootstrap()


def change(first: float, last: float) -> float:
    """Relative change first -> last (the seed's thirds: 84.0 -> 59.3 is -0.294)."""
    return last / first - 1.0


def design(points: Sequence[DriftPoint], *, with_context: bool) -> np.ndarray:
    """Regressors [1, t, log(context), log(context)^2]; each context column only when it adds
    something the others cannot say (one context size: none; two sizes: no square)."""
    t = np.array([p.t_h for p in points])
    x = np.column_stack([np.ones_like(t), t])
    if not with_context:
        return x
    log_ctx = np.log([max(p.context, 1.0) for p in points])
    centred = log_ctx - log_ctx.mean()  # keeps the square well conditioned
    for col in (centred, centred**2):
        wider = np.column_stack([x, col])
        if np.linalg.matrix_rank(wider) > x.shape[1]:
            x = wider
    return x


def block_indices(n: int, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """(resamples, n) row indices: moving blocks of ceil(n^(1/3)) neighbours, concatenated."""
    block = max(1, math.ceil(n ** (1 / 3)))
    per = math.ceil(n / block)
    starts = rng.integers(0, n - block + 1, size=(resamples, per))
    idx = (starts[:, :, None] + np.arange(block)[None, None, :]).reshape(resamples, -1)
    return idx[:, :n]


def fit_trend(points: Sequence[DriftPoint], *, with_context: bool, seed: int) -> Trend | None:
    """The change over the soak (time coefficient x span) with its bootstrap CI; None when the
    design cannot separate time from the rest (e.g. all points at one instant)."""
    x = design(points, with_context=with_context)
    y = np.log([p.rate for p in points])
    if np.linalg.matrix_rank(x) < x.shape[1]:
        return None
    span = float(np.ptp(x[:, 1]))
    b = float(np.linalg.lstsq(x, y, rcond=None)[0][1])
    rng = np.random.default_rng(seed)
    idx = block_indices(len(points), rng, BOOTSTRAP_RESAMPLES)
    xb, yb = x[idx], y[idx]
    xtx = np.einsum("bni,bnj->bij", xb, xb)
    xty = np.einsum("bni,bn->bi", xb, yb)
    # A resample can lose the spread a regressor needs; those are skipped, not guessed.
    ok = np.abs(np.linalg.det(xtx)) > 1e-12 * np.abs(xtx).max(axis=(1, 2)) ** x.shape[1]
    if not ok.any():
        # Every resample lost that spread: a soak of one prompt length against a server that
        # answered each in the same time (an SGLang stand-in) crashed np.percentile here.
        return None
    slopes = np.linalg.solve(xtx[ok], xty[ok][..., None])[:, 1, 0]
    tail = (1 - CI_LEVEL) / 2 * 100
    lo, hi = np.percentile(slopes, [tail, 100 - tail])
    return Trend(
        effect=_growth(b * span),
        lo=_growth(float(lo) * span),
        hi=_growth(float(hi) * span),
        per_hour=_growth(b),
    )


def _growth(log_ratio: float) -> float:
    """exp(x) - 1, saturating to inf (a per-hour slope from seconds of data can be absurd)."""
    return math.expm1(log_ratio) if log_ratio < 700 else math.inf


def needed_requests(n: int, trend: Trend, threshold: float) -> int | None:
    """Requests in all for the CI to clear the threshold at the same effect, from a half-width
    shrinking as 1/sqrt(n); None when the effect sits on the threshold itself."""
    half = (trend.hi - trend.lo) / 2
    room = abs(abs(trend.effect) - threshold)
    if room < 1e-3 * threshold:
        return None
    return max(n + 1, math.ceil(n * (half / room) ** 2))


def drift_verdict(
    points: Sequence[DriftPoint],
    *,
    acceptance_change: float | None = None,
    context_change: float | None = None,
    threshold: float = THRESHOLD,
    seed: int = BOOTSTRAP_SEED,
) -> DriftVerdict:
    """The verdict over `points` (see the module docstring). `acceptance_change` is the rate
    change the speculative acceptance alone predicts (tokens per step, last window over first);
    `context_change` the mean context change first -> last window, kept for the report."""
    n = len(points)
    span = float(max((p.t_h for p in points), default=0) - min((p.t_h for p in points), default=0))

    def verdict(name: str, case: Case, adjusted: Trend | None, raw: Trend | None,
                needed: int | None = None) -> DriftVerdict:  # fmt: skip
        return DriftVerdict(name, case, n, span, threshold, adjusted, raw, needed,
                            acceptance_change, context_change, Bootstrap(seed=seed))  # fmt: skip

    if n < MIN_REQUESTS:
        return verdict("unresolved", "few_requests", None, None, MIN_REQUESTS)
    adjusted = fit_trend(points, with_context=True, seed=seed)
    raw = fit_trend(points, with_context=False, seed=seed)
    if adjusted is None or raw is None:
        return verdict("unresolved", "confounded", adjusted, raw)
    if adjusted.hi < -threshold or adjusted.lo > threshold:
        if acceptance_change is not None and _explains(acceptance_change, adjusted.effect):
            return verdict("mix changed", "acceptance", adjusted, raw)
        return verdict("drift", "beyond", adjusted, raw)
    if -threshold < adjusted.lo and adjusted.hi < threshold:
        # The raw move must be resolved too: a raw CI of -64%..+41% around a -30% point says
        # nothing changed that the sampling of contexts cannot explain.
        if raw.hi < -threshold or raw.lo > threshold:
            return verdict("mix changed", "traffic", adjusted, raw)
        return verdict("no drift", "inside", adjusted, raw)
    return verdict("unresolved", "straddles", adjusted, raw,
                   needed_requests(n, adjusted, threshold))  # fmt: skip


def _explains(predicted: float, observed: float) -> bool:
    return predicted * observed > 0 and abs(predicted) >= EXPLAINED_SHARE * abs(observed)
