"""A capacity summary as types: what the capacity report reads of summary.json's `capacity`
(analysis/capacity.py writes it), read once from its JSON, as summary_types.py does for a run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from loadgen.analysis.capacity import Ended, Search, SloItem
from loadgen.analysis.summary_types import RunTarget, target_json
from loadgen.clock import ClockName
from loadgen.codec import from_json, json_field


@dataclass(frozen=True, slots=True)
class StepItem:
    """One SLO item at one step: the share of streams within it, the measured pNN (None where
    it falls on a miss) and whether the share reaches the item's."""

    attainment: float
    value: float | None
    passes: bool


@dataclass(frozen=True, slots=True)
class StepRow:
    order: int
    value: float
    repeat: int
    n: int
    good: int
    passes: bool
    items: Mapping[str, StepItem]
    verdicts: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class Prefilling:
    """A group whose prompts prefilled ahead of the streams that missed."""

    group: str
    streams: int
    prompt_tokens: int


@dataclass(frozen=True, slots=True)
class BoundaryEvidence:
    """The verdicts of the streams that missed the SLO at the boundary, and the cause's own
    evidence (None where another cause binds, or the server did not say)."""

    missed: int
    verdicts: Mapping[str, int]
    cap: int | None = None
    cap_source: str | None = None
    prefilling: tuple[Prefilling, ...] = ()
    budget: int | None = json_field(key="max_num_batched_tokens", default=None)
    kv_peak_perc: float | None = None
    preemptions: float | None = None
    ttft_p50_ms: float | None = None


@dataclass(frozen=True, slots=True)
class Boundary:
    """What binds at the first failing load (`at`, its label): the cause and its evidence."""

    cause: str | None
    at: str
    evidence: BoundaryEvidence


@dataclass(frozen=True, slots=True)
class CapacitySummary:
    scenario: str | None
    target: RunTarget
    over: str
    group: str | None
    slo: tuple[SloItem, ...]
    search: Search
    steps: tuple[StepRow, ...]
    capacity: float | None
    first_fail: float | None
    ended: Ended
    max_time_s: float | None
    # Steps run at the answer and at the first failing load, by load as printed.
    runs_at: Mapping[str, int]
    boundary: Boundary | None
    clock: ClockName = ClockName.WALL  # none written is the wall's
    interrupted: bool = False


def read_capacity(summary: Mapping[str, Any]) -> CapacitySummary:
    """summary.json's `capacity` as its type, its target read as a run's is (target_json)."""
    c = summary["capacity"]
    return from_json(CapacitySummary, {**c, "target": target_json(c.get("target"))})
