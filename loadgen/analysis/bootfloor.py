"""The boot-floor verdict: is a difference between sweep arms larger than boot-to-boot noise?

Every server-flag arm is a restart, so an A/B across arms is a cross-boot comparison (seed 000,
"Retest": a warm second boot moved 8.7% and a "regression" was retracted). It is readable only
against the spread between boots of the SAME arm. Definitions (all relative, so metrics of any
unit compare):

- arm value: the mean of the arm's per-boot values (the seed's "142.84" is the mean of
  142.85 / 142.89 / 142.78).
- an arm's spread: (max - min) / arm value, over its boots.
- the floor: the largest spread of any arm (the worst boot-to-boot spread seen).
- effect of an arm: (arm value - reference value) / reference value; the reference is the
  first arm.
- multiple: |effect| / floor. `stands` when the multiple is above STANDS_MULTIPLE (2x);
  `unresolved` otherwise; when an arm has fewer than 2 boots with the figure (one boot per
  arm, a cache-dead boot, a boot whose minnows never met the whale's prefill) there is no
  floor at all: `unresolved by construction`.

With the seed's LOOKUP prose boots the floor is arm 1's 0.11 / 142.84 = 0.0770% and the effect
+10.33%, 134x the floor. The seed printed 0.070% and 147x: 0.070% is arm 2's spread (0.10)
over arm 1's value, not the worst spread; the verdict (`stands`) is the same either way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

STANDS_MULTIPLE = 2.0
STANDS = "stands"
UNRESOLVED = "unresolved"
BY_CONSTRUCTION = "unresolved by construction"
MISSING = "missing"


@dataclass(frozen=True, slots=True)
class ArmEffect:
    """One arm against the reference arm, for one metric. Relative figures are fractions
    (0.1033 = +10.33%); `multiple` is None where there is no floor or it is zero."""

    metric: str
    reference: str
    arm: str
    reference_value: float | None
    value: float | None
    effect: float | None
    floor: float | None
    multiple: float | None
    verdict: str


def _present(values: Sequence[float | None]) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def arm_value(values: Sequence[float | None]) -> float | None:
    """Mean of an arm's boots (None when no boot measured it)."""
    xs = _present(values)
    return sum(xs) / len(xs) if xs else None


def arm_spread(values: Sequence[float | None]) -> float | None:
    """(max - min) / mean of an arm's boots; None with fewer than 2 boots or a zero mean."""
    xs = _present(values)
    mean = arm_value(xs)
    if len(xs) < 2 or not mean:
        return None
    return (max(xs) - min(xs)) / abs(mean)


def boot_floor(arms: Mapping[str, Sequence[float | None]]) -> float | None:
    """The largest relative boot-to-boot spread of any arm; None when an arm has < 2 boots
    with a value."""
    spreads = [arm_spread(v) for v in arms.values()]
    if not spreads or any(s is None for s in spreads):
        return None
    return max(s for s in spreads if s is not None)


def floor_verdict(effect: float | None, floor: float | None) -> tuple[float | None, str]:
    """(multiple of the floor, verdict) for one effect."""
    if effect is None:
        return None, MISSING
    if floor is None:
        return None, BY_CONSTRUCTION
    if floor == 0:
        # Boots that agree exactly (a deterministic server): any difference stands.
        return None, STANDS if effect != 0 else UNRESOLVED
    multiple = abs(effect) / floor
    return multiple, STANDS if multiple > STANDS_MULTIPLE else UNRESOLVED


def compare_arms(metric: str, arms: Mapping[str, Sequence[float | None]]) -> list[ArmEffect]:
    """Every arm after the first against the first, for one metric; `arms` maps an arm's name
    to its per-boot values (None for a boot that did not measure it), in declared order."""
    names = list(arms)
    if len(names) < 2:
        return []
    floor = boot_floor(arms)
    ref = names[0]
    ref_value = arm_value(arms[ref])
    out = []
    for name in names[1:]:
        value = arm_value(arms[name])
        effect = None if value is None or not ref_value else (value - ref_value) / abs(ref_value)
        multiple, verdict = floor_verdict(effect, floor)
        out.append(ArmEffect(metric, ref, name, ref_value, value, effect, floor, multiple, verdict))
    return out
