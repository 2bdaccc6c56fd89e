"""A sweep parent's summary as types (analysis/sweep.py writes it): per arm its swept flags and
settings, politeness row, load row, energy and per-group medians; the load block of a load sweep;
the boots of a sweep that booted its arms and the boot-floor verdicts between them. What the
across-arm tables, figures and arms.csv read."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from loadgen.analysis.bootfloor import ArmEffect
from loadgen.analysis.energy import Energy, EnergyNote
from loadgen.analysis.load_sweep import LoadBlock, LoadRow, read_load
from loadgen.analysis.summary_types import Cohort, MinMax, RunSummary, Stats, read_run
from loadgen.codec import from_json


def arm_sort_key(name: str) -> list[tuple[int, float, str]]:
    """Orders arm names numerically where numeric: as text, 512 sorts after 2048."""
    parts = re.split(r"(\d+(?:\.\d+)?)", name)
    return [(1, float(p), "") if i % 2 else (0, 0.0, p) for i, p in enumerate(parts) if p]


@dataclass(frozen=True, slots=True)
class MixedRow:
    """Whale/minnow figures over some mixed reps: the whale's TTFT median, the minnows' TTFT and
    decode rates (during the whale's prefill, after it) min/median/max, minnows that got a
    first token only after the prefill, and the median wall time."""

    whale_ttft_s: float | None
    minnow_ttft_s: MinMax
    minnow_decode_during_tok_s: MinMax
    minnow_decode_after_tok_s: MinMax
    minnows_first_token_after_prefill: int
    wall_s: float | None


@dataclass(frozen=True, slots=True)
class ArmGroup:
    """One group of a sweep arm: its streams, TTFT and decode medians, where its tokens were
    counted, its prompt shape, tokens per content chunk and ladder row (None off a ladder)."""

    n: int
    ttft_median_s: float | None
    decode_median_tok_s: float | None
    token_source: str
    prompt_shape: str | None
    tokens_per_chunk: Stats
    cohort: Cohort | None


@dataclass(frozen=True, slots=True)
class Arm:
    """One arm of a sweep parent: the server flags and client settings it ran with, its
    politeness row (None without a whale), load row, energy (None without GPU telemetry) and
    groups by name."""

    flags: Mapping[str, Any]
    settings: Mapping[str, Any]
    row: MixedRow | None
    load_row: LoadRow
    interrupted: bool
    wall_s: float | None
    energy: Energy | EnergyNote | None
    groups: Mapping[str, ArmGroup]

    @property
    def swept(self) -> dict[str, Any]:
        """The arm's settings and flags in one mapping: what sets it apart from other arms."""
        return {**self.settings, **self.flags}


@dataclass(frozen=True, slots=True)
class BootPoint:
    """One (boot, arm) of a sweep that booted its arms, in run order: the boot's flags, status
    and attempts, and the arm's figures by metric (None: the boot was not measured)."""

    arm: str
    order: int
    boot: int
    flags: Mapping[str, Any]
    status: str
    attempts: int
    values: Mapping[str, float | None] | None


@dataclass(frozen=True, slots=True)
class SweepSummary:
    """A sweep parent's summary: its run, the arms in the summary's order, the order the run
    declared, the load block of a load sweep, and the boots and boot-floor verdicts of a booted
    sweep."""

    run: RunSummary
    arms: Mapping[str, Arm]
    arm_order: tuple[str, ...]
    load: LoadBlock | None
    boots: tuple[BootPoint, ...]
    boot_floor: tuple[ArmEffect, ...]

    def names(self, known: Iterable[str] | None = None) -> list[str]:
        """The declared arm order of `known` (default: every arm); names the run did not declare
        follow, numerically."""
        known = list(self.arms if known is None else known)
        declared = [n for n in self.arm_order if n in known]
        return declared + sorted((n for n in known if n not in declared), key=arm_sort_key)

    def ordered(self) -> list[tuple[str, Arm]]:
        """(name, arm) in the declared order."""
        return [(n, self.arms[n]) for n in self.names()]


def read_sweep(summary: Mapping[str, Any]) -> SweepSummary:
    """A sweep parent's summary.json as a Sweep."""
    return SweepSummary(
        run=read_run(summary),
        arms=from_json(dict[str, Arm], summary["arms"]),
        arm_order=tuple(summary.get("arm_order") or ()),
        load=read_load(summary),
        boots=from_json(tuple[BootPoint, ...], summary.get("boots") or []),
        boot_floor=tuple(from_json(ArmEffect, r) for r in summary.get("boot_floor") or ()),
    )
