"""A sweep's boots: each boot's figures, and per metric the boot-floor verdict between arms.

A sweep that booted each arm more than once holds one run directory per (arm, boot), named
arms/<arm>.boot<k>/, and the parent's run.json lists the boots in run order (`boots`: order,
boot number, flags, status, the arms it ran). Figures per boot are the politeness row of the
arm's run (whale TTFT, minnow TTFT median, minnow decode during the whale's prefill median,
wall) or, without a whale, each group's TTFT and decode medians. A cache-dead boot has no
figures and is listed as such.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from loadgen.analysis.bootfloor import compare_arms
from loadgen.codec import to_json

# (key, label, unit) of the politeness metrics, as the seed's table orders them.
ROW_METRICS = (
    ("whale_ttft_s", "whale TTFT", "s"),
    ("minnow_ttft_s", "minnow TTFT (median)", "s"),
    ("minnow_decode_during_tok_s", "minnow decode during whale prefill (median)", "tok/s"),
    ("wall_s", "wall", "s"),
)


def boot_values(entry: Mapping[str, Any]) -> dict[str, float | None]:
    """The figures of one boot's arm entry (analysis/sweep.py's arm_entry), by metric key."""
    row = entry.get("row")
    if row is not None:
        return {
            "whale_ttft_s": row["whale_ttft_s"],
            "minnow_ttft_s": row["minnow_ttft_s"]["median"],
            "minnow_decode_during_tok_s": row["minnow_decode_during_tok_s"]["median"],
            "wall_s": row["wall_s"],
        }
    out: dict[str, float | None] = {}
    for group, g in sorted(entry["groups"].items()):
        out[f"{group}.ttft_median_s"] = g["ttft_median_s"]
        out[f"{group}.decode_median_tok_s"] = g["decode_median_tok_s"]
    out["wall_s"] = entry.get("wall_s")
    return out


def boot_points(
    boots: list[Mapping[str, Any]], entries: Mapping[str, Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """One point per (boot, arm) in run order: the swept flags, the boot's status and its
    figures (None for a boot that was not measured). `entries` maps a run directory's name
    (arms/<name>) to its arm entry."""
    points = []
    for boot in boots:
        runs = {r["arm"]: r["dir"] for r in boot.get("runs") or []}
        for arm in boot.get("arms") or []:
            entry = entries.get(runs[arm].split("/", 1)[-1]) if arm in runs else None
            points.append(
                {
                    "arm": arm,
                    "order": boot["order"],
                    "boot": boot["boot"],
                    "flags": boot.get("flags") or {},
                    "status": boot["status"],
                    "attempts": len(boot.get("attempts") or []),
                    "values": boot_values(entry) if entry is not None else None,
                }
            )
    return points


def metric_names(values: Iterable[Mapping[str, Any] | None]) -> list[str]:
    """The metrics that boots' figures (None: not measured) carry, the politeness ones first in
    the seed's order."""
    seen = [k for v in values if v for k in v]
    first = [k for k, _, _ in ROW_METRICS if k in seen]
    return first + sorted(set(seen) - set(first))


def floor_rows(points: list[dict[str, Any]], arm_order: list[str]) -> list[dict[str, Any]]:
    """Per metric, every arm against the first: effect, floor, multiple and verdict, over the
    boots that were measured."""
    rows = []
    for metric in metric_names(p["values"] for p in points):
        per_arm = {
            arm: [p["values"].get(metric) for p in points if p["arm"] == arm and p["values"]]
            for arm in arm_order
        }
        rows += [to_json(r) for r in compare_arms(metric, per_arm)]
    return rows
