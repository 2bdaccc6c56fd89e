"""Reasoning models: TTFT vs TTFO, reasoning token counts and their source, decode rates apart;
the decoder on hand-made events, the sim on both clocks."""

from __future__ import annotations

from pathlib import Path

import orjson

from loadgen.analysis import rates
from loadgen.client.decode import StreamDecoder
from loadgen.engine.run import RunOptions, run_plan
from loadgen.records import read_streams
from loadgen.report.sections import reasoning_table
from loadgen.request import StreamRequest
from loadgen.scenario.load import load_scenario
from loadgen.scenario.plan import plan
from loadgen.sim.engine import EngineConfig
from loadgen.sim.profiles import sim_profile
from loadgen.sim.server import SimServerConfig, start_sim_server

from support.virtual import run_virtual

MS = 1_000_000
CHAT = ["api=chat"]


def event(delta: dict | None = None, ct: int | None = None, finish: str | None = None,
          usage: dict | None = None) -> bytes:  # fmt: skip
    obj: dict = {"choices": [] if delta is None else [{"delta": delta, "finish_reason": finish}]}
    if ct is not None:
        obj["usage"] = {"prompt_tokens": 5, "completion_tokens": ct}
    if usage is not None:
        obj["usage"] = usage
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def decode(events: list[bytes]):
    d = StreamDecoder(chat=True)
    for i, e in enumerate(events):
        d.feed(e, (i + 1) * MS)
    d.feed(b"data: [DONE]\n\n", (len(events) + 1) * MS)
    req = StreamRequest(id="s", group="g", rep=0, api="chat", model="m", prompt="p",
                        max_tokens=16, t_intended_ns=0)  # fmt: skip
    return d.to_record(req, run_start_ns=0, http_status=200, t_sent=0, t_headers=0,
                       t_end=None, error=None)  # fmt: skip


def test_reasoning_content_then_content_with_usage_details() -> None:
    final = {"prompt_tokens": 5, "completion_tokens": 6,
             "completion_tokens_details": {"reasoning_tokens": 3}}  # fmt: skip
    rec = decode([
        event({"role": "assistant", "content": ""}),
        event({"reasoning_content": "Let"}), event({"reasoning_content": " me"}),
        event({"reasoning_content": " see"}),
        event({"content": "Four"}), event({"content": "."}), event({"content": "!"}, finish="stop"),
        event(None, usage=final),
    ])  # fmt: skip
    assert rec.chunks == 6 and rec.reasoning_chunks == 3
    times = (rec.t_first_ns, rec.t_first_output_ns, rec.t_last_reasoning_ns)
    assert times == (2 * MS, 5 * MS, 4 * MS)
    assert rec.first_output_chunk == 3
    assert (rec.reasoning_tokens, rec.reasoning_token_source) == (3, "usage_details")
    assert rates.ttft_s(rec) == 0.002 and rates.ttfo_s(rec) == 0.005
    # reasoning: (3 - 1 first token) / (4 - 2 ms); output: (6 - 3 - 1) / (7 - 5 ms)
    assert rates.reasoning_tok_s(rec) == 1000.0
    assert rates.output_tok_s(rec) == 1000.0


def test_delta_reasoning_key_and_estimates_name_their_source() -> None:
    # Continuous usage, no details: the reasoning chunks' own usage tokens, marked estimated.
    rec = decode([
        event({"reasoning": "a b"}, ct=2), event({"reasoning": "c"}, ct=3),
        event({"content": "x"}, ct=4), event({"content": "y"}, ct=5, finish="stop"),
    ])  # fmt: skip
    assert rec.reasoning_chunks == 2 and rec.token_source == "usage_continuous"
    assert (rec.reasoning_tokens, rec.reasoning_token_source) == (3, "estimated_usage_continuous")
    assert rates.reasoning_tok_s(rec) == (3 - 2) / 0.001
    # No usage at all: one token per reasoning chunk.
    rec = decode([event({"reasoning": "a"}), event({"reasoning": "b"}), event({"content": "x"})])
    assert (rec.reasoning_tokens, rec.reasoning_token_source) == (2, "estimated_chunk_count")


def test_a_model_that_does_not_reason_keeps_ttfo_equal_to_ttft() -> None:
    rec = decode([event({"role": "assistant", "content": ""}), event({"content": "a"}),
                  event({"content": "b"}, finish="stop")])  # fmt: skip
    assert rec.reasoning_chunks == 0 and rec.reasoning_tokens is None
    assert rec.reasoning_token_source is None and rec.t_last_reasoning_ns is None
    assert rec.t_first_output_ns == rec.t_first_ns == 2 * MS
    assert rates.ttfo_s(rec) == rates.ttft_s(rec)
    assert rates.output_tok_s(rec) is None and rates.reasoning_tok_s(rec) is None


def test_reasoning_cut_before_the_answer_has_no_ttfo() -> None:
    rec = decode([event({"reasoning": "a"}), event({"reasoning": "b"})])
    assert rec.reasoning_chunks == 2 and rec.t_first_output_ns is None
    assert rates.ttfo_s(rec) is None and rates.ttft_s(rec) == 0.001


def check_reasoning_records(recs, n: int, *, one_read_a_chunk: bool = True) -> None:
    """`one_read_a_chunk`: each chunk came in a read of its own (the virtual clock); on the
    wall clock a busy host can hand the client several in one read, which share its stamp."""
    for r in recs:
        assert r.status == "ok"
        assert r.reasoning_tokens == n and r.reasoning_token_source == "usage_details"
        assert r.completion_tokens == r.max_tokens
        # One token per step on the sim (no speculation): exactly n reasoning chunks first.
        assert r.reasoning_chunks == n == r.first_output_chunk
        assert r.t_first_output_ns == r.chunk_ns[n]
        if one_read_a_chunk:
            assert r.t_first_output_ns > r.t_first_ns
            assert rates.ttfo_s(r) > rates.ttft_s(r)
        else:
            assert r.t_first_output_ns >= r.t_first_ns
            assert rates.ttfo_s(r) >= rates.ttft_s(r)


async def test_sim_reasoning_tokens_on_the_virtual_clock(tmp_path: Path) -> None:
    run = await run_virtual("smoke", [*CHAT, "sim.reasoning_tokens=5"], tmp_path)
    recs = [r for r in run.records.values() if r.phase == "measure"]
    assert len(recs) == 4
    check_reasoning_records(recs, 5)
    g = run.summary["groups"]["long"]["reasoning"]
    assert g["streams"] == 1 and g["reasoning_token_source"] == "usage_details"
    assert g["estimated"] is False
    table = reasoning_table(run.summary)
    assert table is not None and [row[0] for row in table.rows] == ["long", "short"]
    assert not any(n.startswith("!!") for n in table.notes)


async def test_no_reasoning_no_table_on_the_virtual_clock(tmp_path: Path) -> None:
    run = await run_virtual("smoke", CHAT, tmp_path)
    recs = [r for r in run.records.values() if r.phase == "measure"]
    assert all(r.reasoning_chunks == 0 and r.reasoning_tokens is None for r in recs)
    assert all(g["reasoning"] is None for g in run.summary["groups"].values())
    assert reasoning_table(run.summary) is None


async def test_sim_reasoning_tokens_on_the_wall_clock(tmp_path: Path) -> None:
    engine = EngineConfig(max_num_seqs=4, max_num_batched_tokens=256, block_size=16,
                          num_gpu_blocks=1024, profile=sim_profile("tiny"))  # fmt: skip
    config = SimServerConfig(engine=engine, max_model_len=1024, reasoning_tokens=3)
    async with start_sim_server(config) as sim:
        opts = RunOptions(base_url=sim.url, out_root=tmp_path, progress=False)
        run_dir = await run_plan(plan(load_scenario("smoke", CHAT)), opts, warn=lambda m: None)
    recs = [r for r in read_streams(run_dir) if r.phase == "measure"]
    assert len(recs) == 4
    check_reasoning_records(recs, 3, one_read_a_chunk=False)
