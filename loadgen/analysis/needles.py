"""Needle recall per group (and arm): the share of a group's answered needle streams whose
answer held the planted code (loadgen/needle.py). Errored streams are counted apart, not as
misses: a stream that never answered says nothing about recall."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from loadgen.records import StreamRecord


def needle_recall(records: list[StreamRecord]) -> list[dict[str, Any]]:
    """One row per (arm, group) with needle streams; [] when the run planted none."""
    by_group: dict[tuple[str, str], list[StreamRecord]] = defaultdict(list)
    for r in records:
        if r.needle_expected is not None:
            by_group[(r.arm or "", r.group)].append(r)
    rows = []
    for (arm, group), recs in sorted(by_group.items()):
        ok = [r for r in recs if r.status == "ok"]
        hits = sum(1 for r in ok if r.needle_hit)
        rows.append(
            {
                "arm": arm or None,
                "group": group,
                "streams": len(recs),
                "errors": len(recs) - len(ok),
                "hits": hits,
                "recall": hits / len(ok) if ok else None,
            }
        )
    return rows
