"""A replayed trace's head lines, exact: the reuse line always, its banner only when the server's
hit rate falls more than the tolerance below what the trace implies."""

from __future__ import annotations

from loadgen.analysis.reuse import MeasuredReuse, PromptsRaised
from loadgen.report.trace_lines import raised_lines, reuse_lines


def reuse(measured: float | None, below: bool) -> MeasuredReuse:
    gap = None if measured is None else 100 * (measured - 0.45)
    return MeasuredReuse(sharing="hash_ids", block_tokens=512, implied_token_rate=0.45,
                      implied_block_rate=0.5, measured_hit_rate=measured, measured_source="x",
                      gap_pp=gap, below_implied=below, tolerance_pp=2.0)  # fmt: skip


def test_the_reuse_banner_fires_below_the_implied_rate_and_only_then() -> None:
    line = (
        "prefix reuse: trace implies 45.0 % of prompt tokens (unbounded cache, 512-token "
        "blocks, sharing hash_ids); server measured {} (prefix_cache_hits/queries)"
    )
    assert reuse_lines(reuse(0.44, below=False)) == [line.format("44.0 %")]
    assert reuse_lines(reuse(None, below=False)) == [line.format("not reported")]
    assert reuse_lines(reuse(0.10, below=True)) == [
        line.format("10.0 %"),
        "!! server prefix hit rate 10.0 % is 35.0 pp below the trace's implied 45.0 %: the "
        "server's cache does not keep up with this trace (pool too small, evictions, or the rows "
        "were sent salted)",
    ]
    assert reuse_lines(None) == []


def test_raised_prompts_are_noted_only_when_a_row_was_raised() -> None:
    assert raised_lines(PromptsRaised(rows=3, of=1200, smallest=2, raised_to=16)) == [
        "note: 3 of 1,200 trace rows ask for fewer than 16 prompt tokens (smallest 2): sent with "
        "16, loadgen's minimum prompt, so prompt totals exceed the trace's"
    ]
    assert raised_lines(None) == []
