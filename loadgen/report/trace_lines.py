"""A replayed trace's head lines: the prefix reuse the trace implies beside the server's
measured hit rate (analysis/reuse.py), the rows whose prompts were sent longer than asked, and
the rows not sent at all."""

from __future__ import annotations

from loadgen.analysis.reuse import MeasuredReuse, PromptsRaised, RowsSkipped


def reuse_lines(reuse: MeasuredReuse | None) -> list[str]:
    """The report's lines on trace reuse (none when the run replayed no hash_ids)."""
    if reuse is None:
        return []
    implied, measured = 100 * reuse.implied_token_rate, reuse.measured_hit_rate
    shown = "not reported" if measured is None else f"{100 * measured:.1f} %"
    lines = [
        f"prefix reuse: trace implies {implied:.1f} % of prompt tokens (unbounded cache, "
        f"{reuse.block_tokens}-token blocks, sharing {reuse.sharing}); server measured "
        f"{shown} (prefix_cache_hits/queries)"
    ]
    if reuse.below_implied and measured is not None and reuse.gap_pp is not None:
        lines.append(
            f"!! server prefix hit rate {100 * measured:.1f} % is {-reuse.gap_pp:.1f} pp "
            f"below the trace's implied {implied:.1f} %: the server's cache does not keep up "
            "with this trace (pool too small, evictions, or the rows were sent salted)"
        )
    return lines


def raised_lines(raised: PromptsRaised | None) -> list[str]:
    """The note on trace rows whose prompts were sent longer than the trace asked."""
    if raised is None:
        return []
    return [
        f"note: {raised.rows:,} of {raised.of:,} trace rows ask for fewer than "
        f"{raised.raised_to} prompt tokens (smallest {raised.smallest}): sent with "
        f"{raised.raised_to}, loadgen's minimum prompt, so prompt totals exceed the trace's"
    ]


def skipped_lines(skipped: RowsSkipped | None) -> list[str]:
    """The note on trace rows that were read but not sent, as they ask for no output."""
    if skipped is None:
        return []
    return [
        f"note: {skipped.rows:,} of {skipped.of:,} trace rows ask for no output tokens and were "
        "not sent (a failed request in BurstGPT); arrivals still count from the trace's first row"
    ]
