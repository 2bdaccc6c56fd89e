"""Run A vs run B, per group: is a difference larger than the runs' own rep-to-rep spread?

For each group present in both runs and each compared quantity, the difference B - A of the
group medians is set against the noise floor max(spread_A, spread_B), where a run's spread is
max - min of its per-rep medians. |diff| > floor: `exceeds noise`; otherwise `within noise`;
with fewer than 2 reps in either run there is no floor to compare with: `no rep spread`.
"""

from __future__ import annotations

from typing import Any

# (summary field, label, unit); each has per-rep medians in summary["groups"][g]["rep_medians"].
COMPARED = (
    ("ttft_s", "median TTFT", "s"),
    ("decode_tok_s", "median decode", "tok/s"),
    ("chunks_per_s", "median decode", "chunks/s"),
    ("e2e_s", "median e2e", "s"),
)


def compare_summaries(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Rows per (group, quantity) plus the groups present in only one run."""
    ga, gb = a.get("groups", {}), b.get("groups", {})
    rows = []
    for group in sorted(set(ga) & set(gb)):
        for field, label, unit in COMPARED:
            rows.append(_row(group, field, label, unit, ga[group], gb[group]))
    return {
        "rows": rows,
        "only_a": sorted(set(ga) - set(gb)),
        "only_b": sorted(set(gb) - set(ga)),
        "scenario": [a.get("run", {}).get("scenario"), b.get("run", {}).get("scenario")],
        "runs": [a.get("run", {}), b.get("run", {})],
    }


def _row(
    group: str, field: str, label: str, unit: str, a: dict[str, Any], b: dict[str, Any]
) -> dict[str, Any]:
    va, vb = a[field]["median"], b[field]["median"]
    sa, sb = a["rep_spread"].get(field), b["rep_spread"].get(field)
    diff = None if va is None or vb is None else vb - va
    floor = None if sa is None or sb is None else max(sa, sb)
    if diff is None:
        verdict = "missing"
    elif a["reps"] < 2 or b["reps"] < 2 or floor is None:
        verdict = "no rep spread"
    elif abs(diff) > floor:
        verdict = "exceeds noise"
    else:
        verdict = "within noise"
    return {
        "group": group,
        "field": field,
        "label": label,
        "unit": unit,
        "a": va,
        "b": vb,
        "diff": diff,
        "diff_pct": None if diff is None or not va else 100 * diff / va,
        "spread_a": sa,
        "spread_b": sb,
        "noise": floor,
        "verdict": verdict,
    }
