"""Issue 18 item 4: only a stream the plan meant to be cold (`cold` on its record) may raise
WARM CACHE; a session's later turns and hash_ids trace rows are meant to hit the cache."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from loadgen.analysis.summary import analyze_run
from loadgen.analysis.timeline import Timeline
from loadgen.analysis.warmth import cache_warmth
from loadgen.records import read_streams
from loadgen.report.text import render_plain

from support.paths import REPO
from support.run_fixtures import stream, ticks
from support.traces import SHARED, replay
from support.virtual import run_virtual

SCENARIOS = REPO / "scenarios"


def test_the_records_intent_decides_not_its_group():
    warm = stream("w", prompt=1000, cached=992, chunks=ticks(0.05, 3, 0.01))
    tl = Timeline([])
    meant_to_hit = dataclasses.replace(warm, cold=False)
    meant_cold = dataclasses.replace(warm, group="unsalted", cold=True)
    # A salted group's turn that resends its conversation is no warm cache...
    assert cache_warmth(meant_to_hit, tl, frozenset({"g"}), counter_usable=True) is None
    # ...and a cold-meant stream is judged whatever its group says.
    found = cache_warmth(meant_cold, tl, frozenset({"g"}), counter_usable=True)
    assert found is not None and found["cached_tokens"] == 992
    # Records from before `cold` fall back to the group's salting.
    assert cache_warmth(warm, tl, frozenset({"g"}), counter_usable=True) is not None


async def test_agent_sessions_on_a_fresh_engine_raise_no_warm_cache(tmp_path: Path):
    run = await run_virtual(SCENARIOS / "agent_sessions.yaml", [], tmp_path, seed=7)
    cold = {r.id: r.cold for r in run.records.values()}
    assert sorted(i for i, c in cold.items() if c) == [
        f"default/r0/agents/{k}/t0" for k in range(4)
    ]
    assert sum(c is False for c in cold.values()) == 28
    # The later turns did hit (that is the point of them), yet nothing is flagged.
    assert sum((r.cached_tokens or 0) > 0 for r in run.records.values()) == 28
    assert not [s["id"] for s in run.summary["streams"] if "cache_warm" in s["evidence"]]
    assert "WARM CACHE" not in render_plain(run.summary)


async def test_a_shared_prefix_trace_raises_no_warm_cache(tmp_path: Path):
    run_dir, _ = await replay(tmp_path / "a", SHARED)
    recs = read_streams(run_dir)
    assert {r.cold for r in recs} == {False}
    assert sum((r.cached_tokens or 0) > 0 for r in recs) == 3
    summary = analyze_run(run_dir).summary
    assert not [s["id"] for s in summary["streams"] if "cache_warm" in s["evidence"]]
    assert "WARM CACHE" not in (run_dir / "report.txt").read_text()
