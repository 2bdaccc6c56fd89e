"""A replayed trace's implied prefix reuse beside the server's measured prefix hit rate.

The implied rate comes from the trace alone (run.json's scenario, computed when the trace was
read: leading full blocks seen in an earlier row, unbounded cache); the measured one from the
server's prefix_cache_hits / prefix_cache_queries counter deltas over the measured phase. Both
are shares of prompt tokens, so a server whose cache keeps up with the trace shows the implied
rate (less a few blocks lost to requests that arrive while their prefix is still in prefill).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loadgen.run_manifest import RunManifest

# The measured rate may fall this far below the implied one before the report says so.
REUSE_TOLERANCE = 0.02


@dataclass(frozen=True, slots=True)
class PromptsRaised:
    """Trace rows that asked for fewer prompt tokens than loadgen's minimum and were sent with
    it: how many of how many rows, the smallest ask, and the minimum sent instead."""

    rows: int
    of: int
    smallest: int
    raised_to: int


@dataclass(frozen=True, slots=True)
class RowsSkipped:
    """Trace rows read but not replayed, as they ask for no output tokens, of all rows read."""

    rows: int
    of: int


@dataclass(frozen=True, slots=True)
class MeasuredReuse:
    """A replayed trace's implied prefix reuse (shares of prompt tokens, and of blocks) beside
    the server's measured hit rate (None: not reported), the gap in percentage points, and
    whether the measured rate fell more than the tolerance below the implied one."""

    sharing: str | None
    block_tokens: int | None
    implied_token_rate: float
    implied_block_rate: float
    measured_hit_rate: float | None
    measured_source: str
    gap_pp: float | None
    below_implied: bool
    tolerance_pp: float


def _trace_arrival(manifest: RunManifest) -> dict[str, Any]:
    """run.json's trace arrival, or {} for any other arrival."""
    arrival = (manifest.scenario or {}).get("arrival")
    return arrival if isinstance(arrival, dict) and arrival.get("kind") == "trace" else {}


def trace_prompts_raised(manifest: RunManifest) -> dict[str, Any] | None:
    """The trace rows sent with more prompt tokens than they asked for (loadgen's minimum)."""
    raised = _trace_arrival(manifest).get("raised_prompts")
    return raised if isinstance(raised, dict) else None


def trace_rows_skipped(manifest: RunManifest) -> RowsSkipped | None:
    """The trace rows not replayed for asking no output tokens; None when none were."""
    arrival = _trace_arrival(manifest)
    skipped = arrival.get("skipped_rows")
    if not skipped:
        return None
    return RowsSkipped(rows=skipped, of=skipped + arrival["rows"])


def trace_reuse(manifest: RunManifest, server: dict[str, Any]) -> MeasuredReuse | None:
    """Implied vs measured reuse for a trace arrival with hash_ids, else None."""
    arrival = _trace_arrival(manifest)
    implied = arrival.get("implied_reuse")
    if not implied:
        return None
    measured = server.get("prefix_hit_rate") if server.get("available") else None
    rate = implied["token_rate"]
    return MeasuredReuse(
        sharing=arrival.get("sharing"),
        block_tokens=arrival.get("block_tokens"),
        implied_token_rate=rate,
        implied_block_rate=implied["block_rate"],
        measured_hit_rate=measured,
        measured_source="prefix_cache_hits / prefix_cache_queries deltas, measured phase",
        gap_pp=None if measured is None else 100 * (measured - rate),
        below_implied=measured is not None and measured < rate - REUSE_TOLERANCE,
        tolerance_pp=100 * REUSE_TOLERANCE,
    )
