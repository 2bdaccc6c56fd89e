"""A replayed trace's implied prefix reuse beside the server's measured prefix hit rate.

The implied rate comes from the trace alone (run.json's scenario, computed when the trace was
read: leading full blocks seen in an earlier row, unbounded cache); the measured one from the
server's prefix_cache_hits / prefix_cache_queries counter deltas over the measured phase. Both
are shares of prompt tokens, so a server whose cache keeps up with the trace shows the implied
rate (less a few blocks lost to requests that arrive while their prefix is still in prefill).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The measured rate may fall this far below the implied one before the report says so.
REUSE_TOLERANCE = 0.02


def trace_prompts_raised(manifest: dict[str, Any]) -> dict[str, Any] | None:
    """The trace rows sent with more prompt tokens than they asked for (loadgen's minimum)."""
    scenario = manifest.get("scenario")
    arrival = scenario.get("arrival") if isinstance(scenario, dict) else None
    raised = arrival.get("raised_prompts") if isinstance(arrival, dict) else None
    return raised if isinstance(raised, dict) else None


def trace_reuse(manifest: dict[str, Any], server: dict[str, Any]) -> dict[str, Any] | None:
    """Implied vs measured reuse for a trace arrival with hash_ids, else None."""
    scenario = manifest.get("scenario")
    arrival = scenario.get("arrival") if isinstance(scenario, dict) else None
    if not isinstance(arrival, dict) or arrival.get("kind") != "trace":
        return None
    implied = arrival.get("implied_reuse")
    if not implied:
        return None
    measured = server.get("prefix_hit_rate") if server.get("available") else None
    rate = implied["token_rate"]
    return {
        "sharing": arrival.get("sharing"),
        "block_tokens": arrival.get("block_tokens"),
        "implied_token_rate": rate,
        "implied_block_rate": implied["block_rate"],
        "measured_hit_rate": measured,
        "measured_source": "prefix_cache_hits / prefix_cache_queries deltas, measured phase",
        "gap_pp": None if measured is None else 100 * (measured - rate),
        "below_implied": measured is not None and measured < rate - REUSE_TOLERANCE,
        "tolerance_pp": 100 * REUSE_TOLERANCE,
    }


def reuse_lines(reuse: Mapping[str, Any] | None) -> list[str]:
    """The report's lines on trace reuse (none when the run replayed no hash_ids)."""
    if reuse is None:
        return []
    implied, measured = 100 * reuse["implied_token_rate"], reuse["measured_hit_rate"]
    shown = "not reported" if measured is None else f"{100 * measured:.1f} %"
    lines = [
        f"prefix reuse: trace implies {implied:.1f} % of prompt tokens (unbounded cache, "
        f"{reuse['block_tokens']}-token blocks, sharing {reuse['sharing']}); server measured "
        f"{shown} (prefix_cache_hits/queries)"
    ]
    if reuse["below_implied"]:
        lines.append(
            f"!! server prefix hit rate {100 * measured:.1f} % is {-reuse['gap_pp']:.1f} pp "
            f"below the trace's implied {implied:.1f} %: the server's cache does not keep up "
            "with this trace (pool too small, evictions, or the rows were sent salted)"
        )
    return lines
