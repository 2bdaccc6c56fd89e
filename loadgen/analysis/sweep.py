"""Across sweep arms: one politeness row per arm from its mixed-load interference, and the
sweep parent's summary (arms/<arm>/ run directories plus the parent's run.json)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from loadgen.analysis.inputs import arm_dirs, read_manifest
from loadgen.analysis.load_sweep import load_block, load_row
from loadgen.analysis.stats import canonical, median
from loadgen.analysis.summary import SCHEMA, Analysis, analyze_run
from loadgen.analysis.summary_types import MinMax
from loadgen.analysis.sweep_boots import boot_points, floor_rows
from loadgen.analysis.sweep_types import MixedRow, arm_sort_key
from loadgen.clock import ClockName
from loadgen.codec import to_json
from loadgen.run_manifest import ArmInfo


def _minmax(values: list[float]) -> MinMax:
    return MinMax(min(values) if values else None, median(values),
                  max(values) if values else None, len(values))  # fmt: skip


def mixed_row(reps: list[dict[str, Any]]) -> MixedRow:
    """MixedRow over the given mixed reps (summary["mixed"]["reps"] items)."""
    whale_ttft, ttft, during, after, after_only = [], [], [], [], 0
    for rep in reps:
        for inter in rep["interference"]:
            if inter["whale_ttft_s"] is not None:
                whale_ttft.append(inter["whale_ttft_s"])
            for m in inter["minnows"]:
                if m["ttft_s"] is not None:
                    ttft.append(m["ttft_s"])
                if m["first_token"] == "after":
                    after_only += 1
                elif m["decode_during"] is not None:
                    during.append(m["decode_during"]["tok_s"])
                if m["decode_after"] is not None:
                    after.append(m["decode_after"]["tok_s"])
    return MixedRow(median(whale_ttft), _minmax(ttft), _minmax(during), _minmax(after),
                    after_only, median(rep["wall_s"] for rep in reps))  # fmt: skip


@dataclass(frozen=True, slots=True)
class Mixed:
    """A run's whale + minnows block as its report reads it: the whale's group, the minnows'
    groups, each rep's MixedRow by rep number and, over two reps or more, the MixedRow of all
    of them."""

    whale: str
    minnows: tuple[str, ...]
    reps: tuple[tuple[int, MixedRow], ...]
    all_reps: MixedRow | None


def read_mixed(summary: Mapping[str, Any]) -> Mixed | None:
    """The run's Mixed; None without a whale or without a rep that had whale and minnows."""
    mixed = summary.get("mixed")
    if not mixed or not mixed["reps"]:
        return None
    reps = mixed["reps"]
    return Mixed(
        whale=mixed["whale"],
        minnows=tuple(mixed["minnows"]),
        reps=tuple((r["rep"], mixed_row([r])) for r in reps),
        all_reps=mixed_row(reps) if len(reps) > 1 else None,
    )


def arm_entry(summary: dict[str, Any], arm: dict[str, Any]) -> dict[str, Any]:
    """One arm of a sweep parent's summary: its server flags and client-side settings, its
    politeness row (mixed load), its load row (benchmark totals, goodput, tokens/s per user;
    analysis/load_sweep.py) and per-group medians and cohort (ladder) rows."""
    mixed = summary.get("mixed")
    return {
        "flags": arm.get("flags") or {},
        "settings": arm.get("settings") or {},
        "row": to_json(mixed_row(mixed["reps"])) if mixed else None,
        "load_row": to_json(load_row(summary)),
        "interrupted": summary["run"]["interrupted"],
        "wall_s": summary["run"]["wall_s"],
        "energy": summary.get("energy"),
        "groups": {
            g: {
                "n": v["n"],
                "ttft_median_s": v["ttft_s"]["median"],
                "decode_median_tok_s": v["decode_tok_s"]["median"],
                "token_source": v["token_source"],
                "prompt_shape": v["prompt_shape"],
                "tokens_per_chunk": v["tokens_per_chunk"],
                "cohort": v["cohort"],
            }
            for g, v in summary["groups"].items()
        },
    }


def _declared_arm(declared: Mapping[str, ArmInfo], name: str) -> dict[str, Any] | None:
    arm = declared.get(name)
    return None if arm is None else cast(dict[str, Any], to_json(arm))


def analyze_sweep(path: Path) -> tuple[dict[str, Any], dict[str, Analysis]]:
    """The parent summary of a sweep directory and each arm's own analysis, by arm name, in the
    order the parent's run.json declares the arms (then any others by name)."""
    manifest = read_manifest(path)
    declared = {a.name: a for a in manifest.arms or ()}
    found = {d.name: d for d in arm_dirs(path)}
    order = [n for n in declared if n in found] + sorted(
        (n for n in found if n not in declared), key=arm_sort_key
    )
    arms = {name: analyze_run(found[name]) for name in order}
    first = next(iter(arms.values())).summary["run"]
    summary: dict[str, Any] = {
        "schema": SCHEMA,
        "sweep": True,
        "run": {
            "scenario": manifest.scenario_name,
            "target": to_json(manifest.target) if manifest.target else first["target"],
            "model": manifest.model or first["model"],
            "seed": first["seed"] if manifest.seed is None else manifest.seed,
            "interrupted": bool(manifest.interrupted)
            or any(a.summary["run"]["interrupted"] for a in arms.values()),
            "client_limited": any(a.summary["run"]["client_limited"] for a in arms.values()),
            "arm_client_limits": {
                name: a.summary["run"]["client_limits"]
                for name, a in arms.items()
                if a.summary["run"]["client_limited"]
            },
            "speed": first["speed"],
            "clock": ClockName.read(first.get("clock")),
            "boots_per_arm": manifest.boots_per_arm,
            "boots_note": manifest.boots_note,
        },
        "streams": [],
        "groups": {},
        "reps": [],
        "arm_order": order,
        "arms": {
            name: arm_entry(
                a.summary, _declared_arm(declared, name) or a.summary["run"].get("arm") or {}
            )
            for name, a in arms.items()
        },
    }
    load = load_block(summary["arms"], order, manifest.slo)
    if load is not None:
        summary["load"] = to_json(load)
    if manifest.boots is not None:
        declared_order = list(declared)
        points = boot_points(list(manifest.boots), summary["arms"])
        summary["boots"] = points
        summary["boot_floor"] = floor_rows(points, declared_order)
    return canonical(summary), arms
