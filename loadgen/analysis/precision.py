"""How precisely a run's streams pin a quantile: the distribution-free confidence interval of
a percentile from its order statistics, and `--until-precise`'s grammar.

With B ~ Binomial(n, p) the count of a sample's n values below the true p-quantile, the sorted
values x_(1) <= ... <= x_(n) cover it between ranks r and s (1-based) with probability
P(r <= B < s) = F(s - 1) - F(r - 1). The interval takes the largest r with F(r - 1) <= a/2
and the smallest s with F(s - 1) >= 1 - a/2 (a = 1 - CONFIDENCE), so it covers with at least
CONFIDENCE whatever the distribution; with too few values no such r >= 1 or s <= n exists
(a p90 needs 36 values before its upper end exists, a p99 368). Its margin is the larger distance of
either end from the point estimate (stats.py's percentile), relative to it.
"""

from __future__ import annotations

from bisect import insort
from dataclasses import dataclass

from loadgen.analysis.registry import STREAM_METRICS
from loadgen.records import StreamRecord
from loadgen.run_manifest import Precision

CONFIDENCE = 0.95
METRICS = {m.stem: m for m in STREAM_METRICS}
PRECISE_HELP = (
    "metric_pNN=margin (e.g. ttft_p90=5%): keep sending until the 95% order-statistic "
    "confidence interval of that percentile of the measured ok streams is within the margin "
    "(relative) of it, within the plan's requests; repeat the option for several"
)


@dataclass(frozen=True, slots=True)
class PrecisionTarget:
    """One `--until-precise` item: a metric's stem (`ttft`), the percentile as a share (0.9)
    and the relative margin its interval must come within (0.05)."""

    metric: str
    share: float
    margin: float

    @property
    def name(self) -> str:
        return f"{self.metric}_p{self.share * 100:g}"

    @property
    def spec(self) -> str:
        """The target as parse_precise reads it back (run.json keeps a soak's this way)."""
        return f"{self.name}={self.margin!r}"

    @property
    def shown(self) -> str:
        """The target as the user writes it: ttft_p90=5%."""
        return f"{self.name}={self.margin * 100:g}%"

    def on_server_clock(self, value: float | None, speed: float) -> float | None:
        """A value of the metric, measured on the run clock, on a sim's clock at `speed`: a
        time x speed, a rate / speed, a count as it is."""
        unit = METRICS[self.metric].unit
        if value is None or unit not in ("s", "tok/s", "chunks/s"):
            return value
        return value * speed if unit == "s" else value / speed

    def value(self, rec: StreamRecord) -> float | None:
        """The stream's value of the metric (None: it has none, e.g. a failed stream)."""
        return METRICS[self.metric].of(rec)


def parse_precise(text: str) -> PrecisionTarget:
    """`ttft_p90=5%` (or `=0.05`) as a target; ValueError with a one-line message naming the
    option, the grammar and what was wrong."""
    key, sep, value = text.partition("=")
    metric, _, pct = key.strip().partition("_p")
    if not sep or metric not in METRICS or not pct:
        known = ", ".join(sorted(METRICS))
        raise ValueError(f"--until-precise {text!r}: expected {PRECISE_HELP}; metrics: {known}")
    try:
        share = float(pct) / 100
    except ValueError:
        raise ValueError(f"--until-precise {text!r}: pNN must be a number") from None
    if not 0 < share < 1:
        raise ValueError(f"--until-precise {text!r}: pNN must be in (0, 100)")
    value = value.strip()
    try:
        margin = float(value[:-1]) / 100 if value.endswith("%") else float(value)
    except ValueError:
        raise ValueError(
            f"--until-precise {text!r}: {value!r} is not a margin (5% or 0.05)"
        ) from None
    if not 0 < margin < 1:
        raise ValueError(f"--until-precise {text!r}: the margin must be in (0%, 100%)")
    return PrecisionTarget(metric, share, margin)


def ci_ranks(n: int, share: float, confidence: float = CONFIDENCE) -> tuple[int, int] | None:
    """The 1-based ranks (r, s) of the interval's ends among n sorted values (module doc);
    None where n is too small for either end to exist."""
    # Imported here: commands/options.py reads this module for --until-precise's parser, and a
    # command's --help must not load scipy (tests/commands/test_startup.py).
    from scipy.stats import binom

    if n < 1:
        return None
    half = (1 - confidence) / 2
    r = int(binom.ppf(half, n, share))  # the smallest k with F(k) >= a/2 ...
    if binom.cdf(r, n, share) <= half:  # ... is r itself where F(r) == a/2 exactly
        r += 1
    s = int(binom.ppf(1 - half, n, share)) + 1
    if r < 1 or s > n:
        return None
    return r, s


def percentile(xs: list[float], share: float) -> float:
    """stats.py's percentile (linear between closest ranks) of sorted, non-empty `xs`."""
    pos = share * (len(xs) - 1)
    i = int(pos)
    if i + 1 >= len(xs):
        return xs[-1]
    return xs[i] + (pos - i) * (xs[i + 1] - xs[i])


def precision(target: PrecisionTarget, xs: list[float]) -> Precision:
    """The target's precision over sorted values `xs`."""
    n = len(xs)
    estimate = percentile(xs, target.share) if xs else None
    ranks = ci_ranks(n, target.share)
    if ranks is None or not estimate:
        return Precision(target.name, target.margin, n, estimate, None, None, None)
    low, high = xs[ranks[0] - 1], xs[ranks[1] - 1]
    margin = max(estimate - low, high - estimate) / abs(estimate)
    return Precision(target.name, target.margin, n, estimate, low, high, margin)


class PrecisionTracker:
    """The values of each target's metric over the measured streams seen so far, kept sorted,
    and where each target stands. `see` costs an insort and one binomial quantile pair."""

    def __init__(self, targets: tuple[PrecisionTarget, ...]) -> None:
        self.targets = targets
        self._values: list[list[float]] = [[] for _ in targets]
        self.standing = [precision(t, []) for t in targets]

    def see(self, rec: StreamRecord) -> None:
        if rec.phase != "measure":
            return
        for i, target in enumerate(self.targets):
            value = target.value(rec)
            if value is not None:
                insort(self._values[i], float(value))
                self.standing[i] = precision(target, self._values[i])

    @property
    def reached(self) -> bool:
        return all(p.reached for p in self.standing)
