"""Issue #10 item 14 on real vLLM (no --enable-prompt-tokens-details, as on the H200 where it
was seen): one boot, three small runs. A replayed seed comes back warm and the report says so
from the prefix-hit counter; a fresh seed on the same boot is cold."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.analysis.summary import analyze_run
from loadgen.engine.seeds import fresh_seed
from loadgen.server.launcher import Server

from support.real import PLAIN_BOOT, UNIFORM, UNIFORM_SET, note, run_on

pytestmark = pytest.mark.real
SHARED_BOOT = PLAIN_BOOT

SMALL = (*UNIFORM_SET, "groups.streams.max_tokens=16")


def _warm(summary: dict) -> list[dict]:
    return [s["evidence"]["cache_warm"] for s in summary["streams"]
            if s["phase"] == "measure" and "cache_warm" in s["evidence"]]  # fmt: skip


async def test_replayed_seed_is_warned_warm_and_a_fresh_one_is_cold(vllm: Server, tmp_path: Path):
    first = analyze_run(await run_on(vllm, UNIFORM, tmp_path / "a", SMALL, run_seed=11)).summary
    again = analyze_run(await run_on(vllm, UNIFORM, tmp_path / "b", SMALL, run_seed=11)).summary
    fresh = analyze_run(
        await run_on(vllm, UNIFORM, tmp_path / "c", SMALL, run_seed=fresh_seed())
    ).summary
    assert _warm(first) == [] and _warm(fresh) == []
    warm = _warm(again)
    assert len(warm) == 4 and {w["source"] for w in warm} == {"prefix_hits_counter"}
    ttft = {
        name: sorted(s["ttft_s"] for s in summary["streams"] if s["phase"] == "measure")
        for name, summary in (("first", first), ("replay", again), ("fresh", fresh))
    }
    note(
        "vllm replayed seed: prefix-hit counter rise per stream",
        str([w["hits_delta"] for w in warm]),
    )
    note(
        "vllm TTFT s first/replay/fresh (sorted)",
        str({k: [round(t, 3) for t in v] for k, v in ttft.items()}),
    )
