"""The sim's HTTP face over loopback: vLLM v1's wire format, errors, endpoints, disconnects, CLI."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
import time
from typing import Any

import aiohttp
import orjson
import pytest
from click.testing import CliRunner

from loadgen.client.openai import OpenAIClient
from loadgen.commands.sim import sim
from loadgen.server.bootlog import parse_boot_log
from loadgen.sim.runner import VirtualClock
from loadgen.sim.server import TOKENIZE_SLICE_CHARS, boot_lines, start_sim_server
from loadgen.sim.tokenizer import render_chat

from support.loop_turns import LoopTurns
from support.sim import (
    MODEL,
    PREFILL_HEAVY,
    WORD,
    scrape,
    sim_config,
    stream_request,
    truth_by_client_id,
    wait_until,
)

COMPLETION_CHOICE_KEYS = {"index", "text", "logprobs", "finish_reason", "stop_reason"}
CHUNK_KEYS = {"id", "object", "created", "model", "choices"}


async def post_sse(url: str, path: str, body: dict[str, Any]) -> tuple[int, list[Any]]:
    """POSTs a streaming request; returns the status and its events (JSON, or "[DONE]")."""
    async with aiohttp.ClientSession() as session, session.post(url + path, json=body) as resp:
        raw = await resp.read()
    events: list[Any] = []
    for block in raw.split(b"\n\n"):
        if not block:
            continue
        assert block.startswith(b"data: "), block
        data = block[len(b"data: ") :]
        events.append("[DONE]" if data == b"[DONE]" else orjson.loads(data))
    return resp.status, events


async def post_json(url: str, path: str, body: Any) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session:
        data = body if isinstance(body, bytes) else orjson.dumps(body)
        async with session.post(url + path, data=data) as resp:
            return resp.status, orjson.loads(await resp.read())


def completion_body(n_prompt: int, max_tokens: int, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "prompt": WORD * n_prompt, "max_tokens": max_tokens, **extra}


async def test_streamed_completion_is_one_event_per_step_with_cumulative_usage() -> None:
    opts = {"include_usage": True, "continuous_usage_stats": True}
    async with start_sim_server(sim_config()) as server:
        body = completion_body(20, 5, stream=True, stream_options=opts)
        status, events = await post_sse(server.url, "/v1/completions", body)
        [truth] = truth_by_client_id(server).values()
    assert status == 200
    *content, usage_event, done = events
    assert done == "[DONE]"
    assert len(content) == len(truth["tokens_per_step"]) == 5
    for i, ev in enumerate(content, start=1):
        assert set(ev) == CHUNK_KEYS | {"usage"}
        assert ev["object"] == "text_completion"
        assert ev["id"] == truth["request_id"]
        [choice] = ev["choices"]
        assert set(choice) == COMPLETION_CHOICE_KEYS
        assert choice["finish_reason"] == ("length" if i == 5 else None)
        assert choice["text"]
        assert ev["usage"] == {"prompt_tokens": 20, "completion_tokens": i, "total_tokens": 20 + i}
    assert usage_event["choices"] == []
    assert usage_event["usage"] == {
        "prompt_tokens": 20,
        "completion_tokens": 5,
        "total_tokens": 25,
        "prompt_tokens_details": {"cached_tokens": 0},
    }


async def test_include_usage_alone_puts_usage_only_on_the_final_event() -> None:
    async with start_sim_server(sim_config()) as server:
        body = completion_body(8, 3, stream=True, stream_options={"include_usage": True})
        _, events = await post_sse(server.url, "/v1/completions", body)
        # continuous_usage_stats without include_usage is ignored, as vLLM does.
        body["stream_options"] = {"continuous_usage_stats": True}
        _, bare = await post_sse(server.url, "/v1/completions", body)
    assert [("usage" in e) for e in events[:-1]] == [False, False, False, True]
    assert len(bare) == 4 and bare[-1] == "[DONE]"
    assert all("usage" not in e for e in bare[:-1])


async def test_chat_stream_opens_with_a_role_delta_and_counts_the_template() -> None:
    messages = [{"role": "user", "content": "hello there"}]
    kwargs = {"enable_thinking": False}
    opts = {"include_usage": True, "continuous_usage_stats": True}
    async with start_sim_server(sim_config()) as server:
        tok = server.state.tokenizer
        body = {"model": MODEL, "messages": messages, "max_tokens": 4, "stream": True,
                "stream_options": opts, "chat_template_kwargs": kwargs}  # fmt: skip
        status, events = await post_sse(server.url, "/v1/chat/completions", body)
    expected_prompt = len(tok.encode(render_chat(messages, kwargs)))
    assert expected_prompt > len(tok.encode(render_chat(messages)))  # the kwarg is in the prompt
    assert status == 200
    role, *content, usage_event, done = events
    assert role["object"] == "chat.completion.chunk"
    assert role["choices"] == [
        {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
         "finish_reason": None}
    ]  # fmt: skip
    assert role["usage"]["completion_tokens"] == 0
    assert len(content) == 4
    assert all(set(e["choices"][0]["delta"]) == {"content"} for e in content)
    assert content[-1]["choices"][0]["finish_reason"] == "length"
    assert usage_event["usage"]["prompt_tokens"] == expected_prompt
    assert done == "[DONE]"


async def test_non_streaming_completion_and_chat_bodies() -> None:
    async with start_sim_server(sim_config()) as server:
        status, comp = await post_json(server.url, "/v1/completions", completion_body(10, 6))
        chat_body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                     "max_completion_tokens": 3}  # fmt: skip
        _, chat = await post_json(server.url, "/v1/chat/completions", chat_body)
        tok = server.state.tokenizer
    assert status == 200
    assert comp["object"] == "text_completion"
    assert comp["choices"][0]["finish_reason"] == "length"
    assert len(tok.encode(comp["choices"][0]["text"])) == 6
    assert comp["usage"]["completion_tokens"] == 6
    assert comp["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    assert chat["object"] == "chat.completion"
    assert chat["choices"][0]["message"]["role"] == "assistant"
    assert chat["usage"]["completion_tokens"] == 3


async def test_a_prompt_of_token_ids_is_taken_as_is() -> None:
    async with start_sim_server(sim_config()) as server:
        status, body = await post_json(
            server.url, "/v1/completions", {"model": MODEL, "prompt": [5, 6, 7, 8], "max_tokens": 2}
        )
    assert status == 200
    assert body["usage"]["prompt_tokens"] == 4


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        (completion_body(5, 0), 400, "max_tokens"),
        (completion_body(5, -3), 400, "max_tokens"),
        (completion_body(100, 10) | {"min_tokens": 11}, 400, "min_tokens"),
        (completion_body(8192, 1), 400, "prompt"),
        (completion_body(100, 8100), 400, "max_tokens"),
        ({"model": "nope", "prompt": "hi", "max_tokens": 1}, 404, "model"),
        ({"model": MODEL, "prompt": [1, 99_999_999], "max_tokens": 1}, 400, None),
        ({"model": MODEL, "prompt": "hi", "stream_options": {"include_usage": True}}, 400, None),
        ({"model": MODEL, "prompt": ""}, 400, "prompt"),
        ({"model": MODEL, "prompt": "hi", "n": 2}, 400, "n"),
        ({"model": MODEL}, 400, "prompt"),
        (b"{not json", 400, None),
    ],
)
async def test_bad_requests_get_vllm_error_bodies(
    body: Any, status: int, param: str | None
) -> None:
    async with start_sim_server(sim_config(max_model_len=8192)) as server:
        got, err = await post_json(server.url, "/v1/completions", body)
        assert server.engine.ground_truth() == []  # nothing reached the engine
    assert got == status
    assert set(err) == {"error"}
    assert set(err["error"]) == {"message", "type", "param", "code"}
    assert err["error"]["code"] == status
    assert err["error"]["param"] == param
    assert err["error"]["type"] == ("NotFoundError" if status == 404 else "BadRequestError")


async def test_models_health_version_tokenize_detokenize() -> None:
    async with (
        start_sim_server(sim_config(max_model_len=4096)) as server,
        aiohttp.ClientSession() as s,
    ):
        async with s.get(server.url + "/v1/models") as r:
            models = await r.json()
        statuses = []
        for path in ("/health", "/ping", "/version"):
            async with s.get(server.url + path) as r:
                statuses.append(r.status)
        _, tok = await post_json(server.url, "/tokenize", {"model": MODEL, "prompt": WORD * 7})
        messages = [{"role": "user", "content": "hi"}]
        _, chat_tok = await post_json(server.url, "/tokenize", {"messages": messages})
        _, detok = await post_json(server.url, "/detokenize", {"tokens": tok["tokens"]})
        bad, _ = await post_json(server.url, "/detokenize", {"tokens": "x"})
        tokenizer = server.state.tokenizer
    assert [m["id"] for m in models["data"]] == [MODEL]
    assert models["data"][0]["max_model_len"] == 4096
    assert statuses == [200, 200, 200]
    assert tok["count"] == 7 and tok["max_model_len"] == 4096 and len(tok["tokens"]) == 7
    assert chat_tok["count"] == len(tokenizer.encode(render_chat(messages)))
    assert detok == {"prompt": WORD * 7}
    assert bad == 400


async def test_client_records_agree_with_the_ground_truth() -> None:
    async with start_sim_server(sim_config()) as server:
        run_start = time.perf_counter_ns()
        async with OpenAIClient(server.url, concurrency=4, run_start_ns=run_start) as client:
            reqs = [stream_request(f"r{i}", 30 + 10 * i, 12 + i) for i in range(3)]
            recs = await asyncio.gather(*(client.stream(r) for r in reqs))
            rows = await client.get_json("/sim/requests")
    truth = {row["client_request_id"]: row for row in rows}
    for req, rec in zip(reqs, recs, strict=True):
        row = truth[req.id]
        assert rec.status == "ok", rec.error
        assert rec.token_source == "usage_continuous"
        assert rec.prompt_tokens == row["num_prompt_tokens"] == len(req.prompt.split())
        assert rec.completion_tokens == row["completion_tokens"] == req.max_tokens
        assert rec.chunks == len(row["tokens_per_step"])
        assert rec.chunk_tokens == [n for _, _, n in row["tokens_per_step"]]
        # Sent before the engine saw it; the first token arrives after its step ended.
        assert rec.t_sent_ns + run_start <= row["arrival_ns"]
        assert rec.t_first_ns + run_start >= row["first_token_ns"]
        assert rec.t_last_ns + run_start >= row["finished_ns"]


async def test_headers_are_sent_before_the_first_token() -> None:
    # A 4,000-token prefill on prefill-heavy steps takes ~0.17 s before any token exists.
    async with start_sim_server(sim_config(profile=PREFILL_HEAVY)) as server:
        run_start = time.perf_counter_ns()
        async with OpenAIClient(server.url, run_start_ns=run_start) as client:
            rec = await client.stream(stream_request("whale", 4000, 2))
        row = truth_by_client_id(server)["whale"]
    assert rec.status == "ok"
    assert rec.t_headers_ns is not None
    assert rec.t_headers_ns + run_start < row["first_token_ns"]


async def test_a_client_disconnect_aborts_the_request_and_frees_its_blocks() -> None:
    async with start_sim_server(sim_config()) as server, aiohttp.ClientSession() as session:
        body = completion_body(200, 4000, stream=True)
        resp = await session.post(server.url + "/v1/completions", json=body)
        await resp.content.readuntil(b"\n\n")  # one token has been sent
        assert server.engine.kv_cache_usage_perc > 0
        resp.close()  # drop the connection mid-stream
        await wait_until(lambda: server.engine.kv_cache_usage_perc == 0.0)
        [row] = server.engine.ground_truth()
        metrics = await scrape(session, server.url)
    assert row["finish_reason"] == "abort"
    assert 0 < row["completion_tokens"] < 4000
    assert metrics["vllm:num_requests_running"] == 0
    assert metrics["vllm:request_success_total"] == 1  # the abort, under finished_reason="abort"


async def test_sim_config_reports_the_effective_engine_config() -> None:
    cfg = sim_config(max_num_seqs=3, speed=2.0, num_speculative_tokens=2)
    async with start_sim_server(cfg) as server, aiohttp.ClientSession() as s:
        got = await (await s.get(server.url + "/sim/config")).json()
    assert got["speed"] == 2.0
    assert got["engine"]["max_num_seqs"] == 3
    assert got["engine"]["num_speculative_tokens"] == 2
    assert got["engine"]["profile"]["name"] == "tiny"
    assert got["kv_cache_size_tokens"] == 8192 * 16


def test_boot_lines_read_back_through_the_boot_log_parser() -> None:
    cfg = sim_config(max_num_batched_tokens=512, block_size=32, num_gpu_blocks=1000,
                     max_num_seqs=7, max_model_len=4000)  # fmt: skip
    text = "\n".join(boot_lines(cfg))
    assert "Maximum concurrency for 4,000 tokens per request: 8.00x" in text
    assert parse_boot_log(text) == {
        "max_num_batched_tokens": 512,
        "kv_cache_tokens": 32_000,
        "max_model_len": 4000,
        "block_size": 32,
        "max_num_seqs": 7,
    }


def test_a_pool_smaller_than_one_request_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match="does not fit the KV cache of 1600 tokens"):
        sim_config(num_gpu_blocks=100, max_model_len=8192)


def test_cli_rejects_bad_options_in_one_line() -> None:
    runner = CliRunner()
    bad_fault = runner.invoke(sim, ["--fault", "explode=1"])
    too_long = runner.invoke(sim, ["--num-gpu-blocks", "10", "--max-model-len", "8192"])
    assert bad_fault.exit_code == 2 and "unknown fault 'explode=1'" in bad_fault.output
    assert too_long.exit_code == 2 and "does not fit the KV cache" in too_long.output
    assert "Traceback" not in bad_fault.output + too_long.output


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_cli_boots_serves_and_stops_cleanly(sig: signal.Signals) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "loadgen", "sim", "--port", "0", "--max-num-seqs", "2",
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    lines = []
    try:
        while not lines or not lines[-1].startswith("Listening on "):
            line = await asyncio.wait_for(proc.stdout.readline(), timeout=30)
            assert line, "the sim exited before listening"
            lines.append(line.decode().rstrip())
        url = lines[-1].removeprefix("Listening on ")
        async with aiohttp.ClientSession() as s, s.get(url + "/health") as r:
            assert r.status == 200
        proc.send_signal(sig)
        rc = await asyncio.wait_for(proc.wait(), timeout=10)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    stderr = (await proc.stderr.read()).decode()
    assert rc == 0
    assert "Traceback" not in stderr
    assert parse_boot_log("\n".join(lines))["max_num_seqs"] == 2


class _SlowTokenizingClock(VirtualClock):
    """A virtual clock the test moves forward while the server tokenizes."""

    def advance(self, ns: int) -> None:
        self._now_ns += ns


async def test_a_request_arrives_when_received_not_when_tokenized(monkeypatch) -> None:
    clock = _SlowTokenizingClock()
    async with start_sim_server(sim_config(), clock=clock) as server:
        tok = server.state.tokenizer
        encode_slices = tok.encode_slices

        def five_seconds_of_tokenizing(text: str, slice_chars: int):  # type: ignore[no-untyped-def]
            clock.advance(5 * 10**9)
            return encode_slices(text, slice_chars)

        monkeypatch.setattr(tok, "encode_slices", five_seconds_of_tokenizing)
        status, _ = await post_json(server.url, "/v1/completions", completion_body(20, 3))
        (row,) = server.state.engine.ground_truth()
    assert status == 200
    assert clock.now_ns() >= 5 * 10**9  # the tokenizing took 5 s of the runner's clock...
    # ...and the engine saw the request from the instant it was received, and started it then.
    assert row["arrival_s"] == 0.0
    assert row["admitted_s"] == [0.0]
    assert row["first_token_s"] < 0.1


async def test_the_event_loop_runs_other_tasks_while_a_long_prompt_is_tokenized(
    monkeypatch,
) -> None:
    seen: list[int] = []
    async with start_sim_server(sim_config(max_model_len=16_384, num_gpu_blocks=2048)) as server:
        tok = server.state.tokenizer
        encode_slices = tok.encode_slices
        turns = LoopTurns()

        def spy(text: str, slice_chars: int):  # type: ignore[no-untyped-def]
            for part in encode_slices(text, slice_chars):
                seen.append(turns.count)
                yield part

        monkeypatch.setattr(tok, "encode_slices", spy)
        prompt_tokens = 3 * TOKENIZE_SLICE_CHARS // len(WORD) + 10
        async with turns:
            status, body = await post_json(
                server.url, "/v1/completions", completion_body(prompt_tokens, 1)
            )
    assert status == 200
    assert body["usage"]["prompt_tokens"] == prompt_tokens
    assert len(seen) == 4  # parts of >= 16,384 characters
    # Between any two parts, the loop ran the ticker: nothing waits for the whole prompt.
    assert all(b > a for a, b in itertools.pairwise(seen))
