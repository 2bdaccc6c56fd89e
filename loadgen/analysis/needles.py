"""Needle recall per group (and arm): the share of a group's answered needle streams whose
answer held the planted code (loadgen/needle.py). Errored streams are counted apart, not as
misses: a stream that never answered says nothing about recall."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from loadgen.codec import from_json
from loadgen.records import StreamRecord


@dataclass(frozen=True, slots=True)
class NeedleRecall:
    """One (arm, group)'s needle streams: answered ones that held the code, errors apart."""

    arm: str | None
    group: str
    streams: int
    errors: int
    hits: int
    json_derived: ClassVar[tuple[str, ...]] = ("recall",)

    @property
    def recall(self) -> float | None:
        answered = self.streams - self.errors
        return self.hits / answered if answered else None


def needle_recall(records: list[StreamRecord]) -> list[NeedleRecall]:
    """One row per (arm, group) with needle streams; [] when the run planted none."""
    by_group: dict[tuple[str, str], list[StreamRecord]] = defaultdict(list)
    for r in records:
        if r.needle_expected is not None:
            by_group[(r.arm or "", r.group)].append(r)
    rows = []
    for (arm, group), recs in sorted(by_group.items()):
        ok = [r for r in recs if r.status == "ok"]
        hits = sum(1 for r in ok if r.needle_hit)
        rows.append(NeedleRecall(arm or None, group, len(recs), len(recs) - len(ok), hits))
    return rows


def read_needles(summary: Mapping[str, Any]) -> list[NeedleRecall]:
    return from_json(list[NeedleRecall], summary.get("needles") or [])
