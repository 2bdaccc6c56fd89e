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


def compare_summaries(a: Mapping[str, Any], b: Mapping[str, Any]) -> Comparison:
    """Rows per (group, quantity) plus the groups present in only one run."""
    ga, gb = a.get("groups", {}), b.get("groups", {})
    rows = tuple(
        _row(group, field, label, unit, ga[group], gb[group])
        for group in sorted(set(ga) & set(gb))
        for field, label, unit in COMPARED
    )
    return Comparison(rows, tuple(sorted(set(ga) - set(gb))), tuple(sorted(set(gb) - set(ga))),
                      (read_run(a), read_run(b)))  # fmt: skip


def _row(
    group: str, field: str, label: str, unit: str, a: Mapping[str, Any], b: Mapping[str, Any]
) -> CompareRow:
    return CompareRow(group, field, label, unit, a[field]["median"], b[field]["median"],
                      a["rep_spread"].get(field), b["rep_spread"].get(field), a["reps"],
                      b["reps"])  # fmt: skip
