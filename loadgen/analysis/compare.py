"""Run A vs run B, per group: is a difference larger than the runs' own rep-to-rep spread?

For each group present in both runs and each compared quantity, the difference B - A of the
group medians is set against the noise floor max(spread_A, spread_B), where a run's spread is
max - min of its per-rep medians. |diff| > floor: `exceeds noise`; otherwise `within noise`;
with fewer than 2 reps in either run there is no floor to compare with: `no rep spread`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from loadgen.analysis.summary_types import RunSummary, read_run

# (summary field, label, unit); each has per-rep medians in summary["groups"][g]["rep_medians"].
COMPARED = (
    ("ttft_s", "median TTFT", "s"),
    ("decode_tok_s", "median decode", "tok/s"),
    ("chunks_per_s", "median decode", "chunks/s"),
    ("e2e_s", "median e2e", "s"),
)


@dataclass(frozen=True, slots=True)
class CompareRow:
    """One quantity of one group: B - A of the group medians against the noise floor."""

    group: str
    field: str
    label: str
    unit: str
    a: float | None
    b: float | None
    spread_a: float | None
    spread_b: float | None
    reps_a: int
    reps_b: int

    @property
    def diff(self) -> float | None:
        return None if self.a is None or self.b is None else self.b - self.a

    @property
    def diff_pct(self) -> float | None:
        diff = self.diff
        return None if diff is None or not self.a else 100 * diff / self.a

    @property
    def noise(self) -> float | None:
        """max(spread A, spread B); None where either run has no spread."""
        if self.spread_a is None or self.spread_b is None:
            return None
        return max(self.spread_a, self.spread_b)

    @property
    def verdict(self) -> str:
        """ "exceeds noise" | "within noise" | "no rep spread" (fewer than 2 reps on a side) |
        "missing" (a side has no median)."""
        diff, floor = self.diff, self.noise
        if diff is None:
            return "missing"
        if self.reps_a < 2 or self.reps_b < 2 or floor is None:
            return "no rep spread"
        return "exceeds noise" if abs(diff) > floor else "within noise"


@dataclass(frozen=True, slots=True)
class Comparison:
    rows: tuple[CompareRow, ...]
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]
    runs: tuple[RunSummary, RunSummary]
    # Why the two may not be like for like: a run cut short, another scenario or plan, groups
    # measured on unlike counts. Empty: nothing tells them apart but the figures.
    unlike: tuple[str, ...] = ()


# Fields of a resolved scenario that differ between any two runs of it by design.
_PER_RUN = frozenset({"seed", "description"})
# Plan differences named one by one; past these, a count.
_NAMED_DIFFERENCES = 4


def compare_summaries(
    a: Mapping[str, Any],
    b: Mapping[str, Any],
    plans: tuple[Mapping[str, Any] | None, Mapping[str, Any] | None] = (None, None),
) -> Comparison:
    """Rows per (group, quantity) plus the groups present in only one run; `plans`: each run's
    resolved scenario (run.json), whose differences are said."""
    ga, gb = a.get("groups", {}), b.get("groups", {})
    common = sorted(set(ga) & set(gb))
    rows = tuple(
        _row(group, field, label, unit, ga[group], gb[group])
        for group in common
        for field, label, unit in COMPARED
    )
    ra, rb = runs = (read_run(a), read_run(b))
    unlike = (*unlike_runs((ra.interrupted, rb.interrupted), (ra.scenario, rb.scenario), plans),
              *unlike_counts({g: (ga[g], gb[g]) for g in common}))  # fmt: skip
    return Comparison(rows, tuple(sorted(set(ga) - set(gb))), tuple(sorted(set(gb) - set(ga))),
                      runs, unlike)  # fmt: skip


Pair = tuple[Any, Any]


def unlike_runs(interrupted: Pair, scenarios: Pair, plans: Pair) -> list[str]:
    """Why two runs (or two soaks) are not like for like: a side cut short, another scenario,
    or the fields of their resolved plans that differ."""
    return [*_partial(interrupted), *_other_plans(scenarios, plans)]


def _partial(interrupted: Pair) -> list[str]:
    return [f"{side} was interrupted: its figures cover what finished"
            for side, cut in zip("AB", interrupted, strict=True) if cut]  # fmt: skip


def _other_plans(scenarios: Pair, plans: Pair) -> list[str]:
    """The scenarios' names where they differ, else the fields of their plans that do."""
    a, b = scenarios
    if a != b:
        return [f"A ran scenario {a}, B ran {b}: groups of one name may differ in all but the "
                "name"]  # fmt: skip
    if plans[0] is None or plans[1] is None:
        return []
    fa, fb = _flat(plans[0]), _flat(plans[1])
    keys = sorted(k for k in fa.keys() | fb.keys()
                  if k.split(".")[0] not in _PER_RUN and fa.get(k) != fb.get(k))  # fmt: skip
    if not keys:
        return []
    named = "; ".join(f"{k} {fa.get(k)} vs {fb.get(k)}" for k in keys[:_NAMED_DIFFERENCES])
    more = len(keys) - _NAMED_DIFFERENCES
    return [f"the plans differ (--set or an edited file): {named}"
            + (f"; and {more} more" if more > 0 else "")]  # fmt: skip


def _flat(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested mapping's leaves by dotted path, as --set names them: a list of named items
    (a scenario's groups) by their names, another list one leaf."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, list) and all(isinstance(v, Mapping) and "name" in v for v in value):
            value = {v["name"]: v for v in value}
        if isinstance(value, Mapping):
            out |= _flat(value, f"{path}.")
        else:
            out[path] = value
    return out


def unlike_counts(
    groups: Mapping[str, tuple[Mapping[str, Any], Mapping[str, Any]]], sides: Pair = ("A", "B")
) -> list[str]:
    """The groups whose medians stand on other counts of streams, or of ok ones."""
    out = []
    (x, y) = sides
    for name, (a, b) in groups.items():
        if (a.get("n"), a.get("ok")) != (b.get("n"), b.get("ok")):
            out.append(f"group {name}: {x} {a['ok']} ok of {a['n']}, {y} {b['ok']} ok of {b['n']}")
    return out


def _row(
    group: str, field: str, label: str, unit: str, a: Mapping[str, Any], b: Mapping[str, Any]
) -> CompareRow:
    return CompareRow(group, field, label, unit, a[field]["median"], b[field]["median"],
                      a["rep_spread"].get(field), b["rep_spread"].get(field), a["reps"],
                      b["reps"])  # fmt: skip
