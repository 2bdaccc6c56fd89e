"""Mooncake hash_ids replayed as shared prefix blocks: the trace's implied reuse, the prompts
built from it (token-exact, sharing exactly the leading blocks), and the sim measuring it."""

from pathlib import Path

import orjson
import pytest

from loadgen.analysis.reuse import trace_reuse
from loadgen.analysis.summary import analyze_run
from loadgen.records import read_streams
from loadgen.run_manifest import RunManifest
from loadgen.scenario.load import ScenarioError, load_scenario
from loadgen.scenario.plan import plan
from loadgen.scenario.prompts import PromptBuilder, WordCounter
from loadgen.scenario.traces import implied_reuse, read_trace
from loadgen.sim.tokenizer import SimTokenizer

from support.traces import DATA, SHARED, replay, write_scenario

FULL = Path("/work/shared/traces/mooncake/conversation_trace.jsonl")


def test_implied_reuse_counts_leading_full_blocks_seen_before() -> None:
    rows, _ = read_trace(SHARED, "mooncake", None, 1.0)
    reuse = implied_reuse(rows, 512)
    # Hits: row 1 blocks 0,1; row 2 block 0; row 3 blocks 0,1,3 (6 is new); rows 4, 5 none.
    assert reuse.hit_tokens == (2 + 1 + 3) * 512
    assert reuse.prompt_tokens == 1100 + 1600 + 600 + 2048 + 300 + 1200
    assert reuse.token_rate == 3072 / 6848
    assert (reuse.blocks_seen, reuse.blocks) == (6, 17)


def test_hash_ids_are_read_and_validated(tmp_path: Path) -> None:
    rows, _ = read_trace(SHARED, "mooncake", None, 1.0)
    assert rows[3].hash_ids == (0, 1, 3, 6)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 9, "output_length": 1, "hash_ids": "x"}\n')
    scenario = write_scenario(tmp_path, bad)
    with pytest.raises(ScenarioError, match=r"bad\.jsonl:1: bad mooncake row .*hash_ids"):
        load_scenario(scenario)


def test_sharing_hash_ids_needs_a_trace_with_them(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path, DATA / "azure_small.csv", sharing="hash_ids")
    with pytest.raises(ScenarioError, match=r"replay\.yaml:\d+: arrival\.trace\.sharing"):
        load_scenario(scenario)


async def test_rows_share_exactly_their_common_leading_blocks(tmp_path: Path) -> None:
    s = load_scenario(write_scenario(tmp_path, SHARED))
    assert s.arrival.sharing == "hash_ids"
    reqs = list(plan(s, run_seed=11).requests())
    builder = PromptBuilder(WordCounter())
    built = [await builder.build(r.prompt) for r in reqs]
    words = [b.text.split(" ")[1:] for b in built]  # WordCounter: one token per word
    assert [len(w) for w in words] == [1100, 1600, 600, 2048, 300, 1200]
    assert [b.tokens for b in built] == [1100, 1600, 600, 2048, 300, 1200]
    # Rows 0 and 1 share blocks 0,1 (1024 tokens), then differ at the first token.
    assert words[0][:1024] == words[1][:1024] and words[0][1024] != words[1][1024]
    assert words[3][:1536] == words[1][:1536] and words[3][1536] != words[1][1536]
    assert words[2][:512] == words[0][:512] and words[2][512] != words[0][512]
    assert words[4][0] != words[0][0] and words[5][0] != words[0][0]
    # Another run seed salts every block: a long-lived server gets nothing from the last run.
    other = [await builder.build(r.prompt) for r in plan(s, run_seed=12).requests()]
    assert other[0].text.split(" ")[1:17] != words[0][:16]


async def test_block_text_is_exact_on_the_sims_tokenizer(tmp_path: Path) -> None:
    tok = SimTokenizer()

    class SimCounter:
        method = "local"

        async def count(self, text: str) -> int:
            return tok.count(text)

    s = load_scenario(write_scenario(tmp_path, SHARED))
    builder = PromptBuilder(SimCounter())
    ids = [tok.encode((await builder.build(r.prompt)).text) for r in plan(s).requests()]
    assert [len(i) for i in ids] == [1100, 1600, 600, 2048, 300, 1200]
    assert ids[0][:1024] == ids[1][:1024] and ids[0][1024] != ids[1][1024]


async def test_sim_measures_the_implied_reuse_and_salted_gets_none(tmp_path: Path) -> None:
    run_dir, truth = await replay(tmp_path / "a", SHARED)
    cached = {r["client_request_id"]: r["num_cached_tokens"] for r in truth}
    recs = sorted(read_streams(run_dir), key=lambda r: r.t_intended_ns)
    assert [r.prompt_tokens for r in recs] == [1100, 1600, 600, 2048, 300, 1200]
    assert [cached[r.id] for r in recs] == [0, 1024, 512, 1536, 0, 0]
    assert [r.cached_tokens for r in recs] == [0, 1024, 512, 1536, 0, 0]
    reuse = analyze_run(run_dir).summary["run"]["trace_reuse"]
    assert reuse["measured_hit_rate"] == pytest.approx(3072 / 6848)
    assert reuse["implied_token_rate"] == pytest.approx(3072 / 6848)
    assert reuse["below_implied"] is False
    assert "trace implies 44.9 %" in (run_dir / "report.txt").read_text()

    salted_dir, _ = await replay(tmp_path / "b", SHARED, sharing="salted")
    salted = analyze_run(salted_dir).summary["run"]["trace_reuse"]
    assert salted["measured_hit_rate"] == 0.0 and salted["below_implied"] is True
    assert (
        "!! server prefix hit rate 0.0 % is 44.9 pp below"
        in (salted_dir / "report.txt").read_text()
    )


def test_trace_reuse_is_none_without_hash_ids() -> None:
    manifest = RunManifest(scenario={"arrival": {"kind": "trace", "implied_reuse": None}})
    assert trace_reuse(manifest, {"available": True, "prefix_hit_rate": 0.5}) is None


@pytest.mark.skipif(not FULL.exists(), reason="the shared Mooncake trace is not on this machine")
async def test_full_trace_first_rows_hit_as_implied(tmp_path: Path) -> None:
    run_dir, _ = await replay(
        tmp_path, FULL, limit=200, time_scale=0.01, num_gpu_blocks=400_000, max_model_len=200_000
    )
    reuse = orjson.loads((run_dir / "summary.json").read_bytes())["run"]["trace_reuse"]
    assert abs(reuse["gap_pp"]) < 2.0, reuse


async def test_small_pool_falls_below_the_implied_reuse_and_says_so(tmp_path: Path) -> None:
    # Row 1 needs nearly the whole pool, so row 0's blocks are evicted before row 2 asks.
    trace = tmp_path / "evict.jsonl"
    rows = [(0, [0, 1, 2, 3, 4]), (1000, [10, 11, 12, 13, 14]), (2000, [0, 1, 2, 3, 5])]
    trace.write_text("".join(
        orjson.dumps({"timestamp": t, "input_length": 2100, "output_length": 4, "hash_ids": ids})
        .decode() + "\n" for t, ids in rows
    ))  # fmt: skip
    run_dir, _ = await replay(tmp_path / "run", trace, num_gpu_blocks=140, max_model_len=2240)
    reuse = analyze_run(run_dir).summary["run"]["trace_reuse"]
    assert reuse["implied_token_rate"] == pytest.approx(2048 / 6300)
    assert reuse["measured_hit_rate"] < reuse["implied_token_rate"] - 0.02
    assert reuse["below_implied"] is True
    report = (run_dir / "report.txt").read_text()
    assert "below the trace's implied 32.5 %" in report


BAILIAN_ROWS = [  # Qwen-Bailian's schema (SOURCE.txt): 16-token blocks, full context per turn
    {"chat_id": 1, "parent_chat_id": -1, "timestamp": 0.0, "input_length": 40,
     "output_length": 5, "type": "text", "turn": 1, "hash_ids": [1, 2, 3]},
    {"chat_id": 2, "parent_chat_id": -1, "timestamp": 0.5, "input_length": 20,
     "output_length": 5, "type": "text", "turn": 1, "hash_ids": [10, 11]},
    {"chat_id": 3, "parent_chat_id": 1, "timestamp": 1.0, "input_length": 70,
     "output_length": 5, "type": "text", "turn": 2, "hash_ids": [1, 2, 4, 5, 6]},
    {"chat_id": 4, "parent_chat_id": 3, "timestamp": 2.0, "input_length": 100,
     "output_length": 5, "type": "search", "turn": 3, "hash_ids": [1, 2, 4, 5, 7, 8, 9]},
]  # fmt: skip


async def test_bailian_rows_replay_as_sessions_with_their_sharing(tmp_path: Path) -> None:
    trace = tmp_path / "qwen_traceA_blksz_16.jsonl"
    trace.write_text("".join(orjson.dumps(r).decode() + "\n" for r in BAILIAN_ROWS))
    s = load_scenario(write_scenario(tmp_path, trace))
    assert (s.arrival.format, s.arrival.block_tokens, s.arrival.sharing) == (
        "bailian", 16, "hash_ids",
    )  # fmt: skip
    assert [(r.session, r.turn) for r in s.arrival.rows] == [
        ("1", 1), ("2", 1), ("1", 2), ("1", 3),
    ]  # fmt: skip
    # Chat 3 shares blocks 1, 2 (32 tokens); chat 4 shares 1, 2, 4, 5 (64 tokens).
    assert s.arrival.implied.hit_tokens == 96 and s.arrival.implied.prompt_tokens == 230
    run_dir, _ = await replay(tmp_path / "run", trace)
    recs = sorted(read_streams(run_dir), key=lambda r: r.t_intended_ns)
    assert [r.prompt_tokens for r in recs] == [40, 20, 70, 100]
    assert [r.cached_tokens for r in recs] == [0, 0, 32, 64]
    assert [(r.session, r.turn) for r in recs] == [
        ("default/r0/1", 1), ("default/r0/2", 1), ("default/r0/1", 2), ("default/r0/1", 3),
    ]  # fmt: skip
    turns = analyze_run(run_dir).summary["sessions"]["rows"]
    assert [(t["turn"], t["sessions"], t["cached_tokens"]) for t in turns] == [
        (1, 2, 0), (2, 1, 32), (3, 1, 64),
    ]  # fmt: skip
