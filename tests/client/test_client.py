"""The streaming client against the paced server: timings against the server's own send log,
token-true counts, the continuous-usage fallback, pass-through fields, warm-up and sizing."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from loadgen.analysis.rates import decode_tok_s, ttft_s
from loadgen.cli import main
from loadgen.client.endpoint import resolve_target
from loadgen.client.openai import OpenAIClient
from loadgen.records import read_streams
from loadgen.request import StreamRequest

from support.pacedserver import PacedConfig, PacedServer, ThreadedPacedServer, count_tokens

MS = 1_000_000


def req(i: int, api: str = "completions", max_tokens: int = 12, **kw) -> StreamRequest:
    return StreamRequest(
        id=f"s{i}", model="m", prompt=f"prompt {i}", max_tokens=max_tokens, api=api, **kw
    )


async def run_streams(url: str, reqs: list[StreamRequest], **kw) -> tuple[OpenAIClient, list]:
    async with OpenAIClient(url, concurrency=len(reqs), **kw) as client:
        await client.warm(len(reqs))
        recs = await asyncio.gather(*(client.stream(r) for r in reqs))
    return client, recs


async def timing_errors(api: str) -> list[tuple[float, float, float]]:
    """Per stream: |TTFT - true TTFT from the send|, |TTFT - server's own TTFT| (s), and the
    relative decode-rate error, against the server's logged send times."""
    async with PacedServer(PacedConfig(ttft_s=0.05, gap_s=0.02)) as srv:
        client, recs = await run_streams(srv.url, [req(i, api, max_tokens=21) for i in range(2)])
    errors = []
    for rec in recs:
        truth = srv.by_id(rec.id)
        assert rec.status == "ok" and rec.http_status == 200
        assert (rec.completion_tokens, rec.chunks, rec.events) == (21, 21, 22 + (api == "chat"))
        assert rec.token_source == "usage_continuous" and rec.chunk_tokens == [1] * 21
        assert rec.t_headers_ns is not None and rec.t_sent_ns < rec.t_headers_ns < rec.t_first_ns
        assert rec.t_last_ns <= rec.t_done_ns
        assert rec.finish_reason == "length" and rec.prompt_tokens == 2
        ttft = ttft_s(rec)
        sent = rec.t_sent_ns + client.run_start_ns
        true_rate = sum(truth.tokens[1:]) / ((truth.send_ns[-1] - truth.send_ns[0]) / 1e9)
        errors.append(
            (
                abs(ttft - (truth.send_ns[0] - sent) / 1e9),
                abs(ttft - (truth.send_ns[0] - truth.arrival_ns) / 1e9),
                abs(decode_tok_s(rec) / true_rate - 1),
            )
        )
    return errors


@pytest.mark.parametrize("api", ["completions", "chat"])
async def test_ttft_and_decode_rate_match_the_servers_true_send_times(api: str) -> None:
    # Within 2 ms / 2%. On 2 shared cores a descheduled process can add a few ms to one read,
    # so a round that misses is measured again, at most three rounds in all.
    rounds = []
    for _ in range(3):
        rounds.append(await timing_errors(api))
        if all(a < 0.002 and b < 0.002 and r < 0.02 for a, b, r in rounds[-1]):
            return
    pytest.fail(f"timing off in every round (ttft s, ttft-vs-server s, rate rel): {rounds}")


@pytest.mark.parametrize("api", ["completions", "chat"])
async def test_three_tokens_per_chunk_counts_tokens_from_usage(api: str) -> None:
    async with PacedServer(PacedConfig(ttft_s=0.01, gap_s=0.005, tokens_per_chunk=3)) as srv:
        _, (rec,) = await run_streams(srv.url, [req(0, api, max_tokens=30)])
    assert (rec.completion_tokens, rec.chunks, rec.chunk_tokens) == (30, 10, [3] * 10)
    assert rec.token_source == "usage_continuous"
    assert len(rec.chunk_ns) == 10


async def test_tokens_that_decode_to_empty_text_still_count_by_usage() -> None:
    async with PacedServer(PacedConfig(ttft_s=0.01, gap_s=0.002, empty_text=True)) as srv:
        _, (rec,) = await run_streams(srv.url, [req(0, "chat", max_tokens=8)])
    assert (rec.status, rec.completion_tokens, rec.chunks) == ("ok", 8, 8)


async def test_rejected_continuous_usage_falls_back_once_and_is_remembered() -> None:
    cfg = PacedConfig(ttft_s=0.01, gap_s=0.002, reject_continuous=True)
    async with PacedServer(cfg) as srv, OpenAIClient(srv.url) as client:
        first = await client.stream(req(0, max_tokens=6))
        second = await client.stream(req(1, max_tokens=6))
    assert srv.rejected == 1
    assert client.continuous_usage is False
    for rec in (first, second):
        assert (rec.status, rec.http_status, rec.token_source) == ("ok", 200, "usage_final")
        assert (rec.completion_tokens, rec.chunks, rec.chunk_tokens) == (6, 6, None)
    assert "continuous_usage_stats" not in srv.by_id("s1").body["stream_options"]


async def test_request_fields_pass_through_and_extra_body_overrides_nothing() -> None:
    r = req(
        0,
        "chat",
        max_tokens=4,
        min_tokens=2,
        ignore_eos=True,
        cache_salt="salt-1",
        chat_template_kwargs={"enable_thinking": False},
        extra_body={"temperature": 0.5, "max_tokens": 999},
    )
    async with PacedServer(PacedConfig(ttft_s=0.0, gap_s=0.0)) as srv:
        _, (rec,) = await run_streams(srv.url, [r])
    body = srv.by_id("s0").body
    assert body == {
        "model": "m",
        "stream": True,
        "max_tokens": 4,
        "messages": [{"role": "user", "content": "prompt 0"}],
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "ignore_eos": True,
        "min_tokens": 2,
        "cache_salt": "salt-1",
        "chat_template_kwargs": {"enable_thinking": False},
        "temperature": 0.5,
    }
    assert rec.completion_tokens == 4


async def test_huge_prompt_and_a_multi_megabyte_sse_line_stream_fine() -> None:
    prompt = " ".join(["word"] * 100_000)  # about 500 KB of body, 100k tokens here
    big = StreamRequest(id="big", model="m", prompt=prompt, max_tokens=3)
    long = req(1, max_tokens=4, extra_body={"fault": "long_line"})
    async with PacedServer(PacedConfig(ttft_s=0.0, gap_s=0.0)) as srv:
        _, (a, b) = await run_streams(srv.url, [big, long])
    assert (a.status, a.prompt_tokens, a.completion_tokens) == ("ok", 100_000, 3)
    assert (b.status, b.chunks, b.completion_tokens, b.parse_errors) == ("ok", 5, 4, 0)
    assert b.bytes > 4 << 20


async def test_warm_opens_the_connections_the_streams_then_use() -> None:
    async with PacedServer(PacedConfig(ttft_s=0.01, gap_s=0.001)) as srv:
        await run_streams(srv.url, [req(i, max_tokens=3) for i in range(4)])
    assert len(set(srv.model_peers)) == 4
    assert {s.peer for s in srv.served} <= set(srv.model_peers)
    async with PacedServer() as srv, OpenAIClient(srv.url, concurrency=2) as client:
        await client.warm(5)  # capped at the pool: asking for more must not hang
    assert len(set(srv.model_peers)) == 2


def test_resolve_target_normalises_and_falls_back_to_env(monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert resolve_target("http://h:8000/v1/", None) == ("http://h:8000", None)
    assert resolve_target("http://h:8000", "k") == ("http://h:8000", "k")
    assert resolve_target("h:8000/proxy/v1", None) == ("http://h:8000/proxy", None)
    with pytest.raises(ValueError, match="--base-url"):
        resolve_target(None, None)
    monkeypatch.setenv("OPENAI_BASE_URL", "https://api.example/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "env-key")
    assert resolve_target(None, None) == ("https://api.example", "env-key")
    assert resolve_target("http://flag:1", "flag-key") == ("http://flag:1", "flag-key")


def served_prompts(cfg: PacedConfig, tokens: int, count: int) -> tuple[list[str], str]:
    """`loadgen request`'s prompts as the server got them, and the command's output."""
    with ThreadedPacedServer(cfg) as srv:
        args = ["request", "--base-url", srv.url, "--prompt-tokens", str(tokens)]
        result = CliRunner().invoke(main, [*args, "-n", str(count), "--max-tokens", "2"])
    assert result.exit_code == 0, result.output
    return [s.body["prompt"] for s in srv.served], result.output


@pytest.mark.parametrize("dialect", ["vllm", "llamacpp"])
def test_request_prompts_are_sized_exactly_by_tokenize_and_distinct(dialect: str) -> None:
    prompts, said = served_prompts(PacedConfig(tokenize=dialect), 57, 3)
    assert "(exact, sized by /tokenize)" in said
    assert [count_tokens(p) for p in prompts] == [57, 57, 57]
    assert len({p.split()[0] for p in prompts}) == 3  # salted: differ at the first token


def test_request_prompts_without_tokenize_are_labelled_estimated() -> None:
    prompts, said = served_prompts(PacedConfig(tokenize=None), 40, 2)
    assert "(estimated: no /tokenize)" in said and "exact" not in said
    # Sized by the estimate (a token per four characters, rounded up) to the 40 asked for.
    assert len(set(prompts)) == 2 and [-(-len(p) // 4) for p in prompts] == [40, 40]


def test_cli_request_prints_the_summary_and_writes_the_run_directory(tmp_path: Path) -> None:
    out = tmp_path / "run"
    cfg = PacedConfig(ttft_s=0.01, gap_s=0.002, tokens_per_chunk=2)
    with ThreadedPacedServer(cfg) as srv:
        args = ["request", "--base-url", srv.url + "/v1", "--prompt-tokens", "30"]
        args += ["--max-tokens", "10", "-n", "3", "-c", "2"]
        result = CliRunner().invoke(main, [*args, "--out", str(out)])
        rows = CliRunner().invoke(main, [*args, "--per-stream"])
    assert result.exit_code == 0, result.output
    assert "model paced" in result.output and "exact" in result.output
    assert "over ok streams" in result.output
    # The benchmark block, as `vllm bench serve` prints it: 3 ok, 0 failed, tokens from usage.
    bench = result.output[result.output.index("Benchmark (measure phase") :]
    assert re.search(r"total\s*│\s+3\s*│\s+0\s*│", bench), bench
    assert "usage_continuous" in bench and "Benchmark latency, ms" in bench
    # All ok: the summary only; --per-stream adds a row per stream. Ids are the plan's.
    ids = [f"default/r0/request/{i}" for i in range(3)]
    assert [i in result.output for i in ids] == [False] * 3
    assert rows.exit_code == 0, rows.output
    assert [i in rows.output for i in ids] == [True] * 3
    recs = read_streams(out)
    assert sorted(r.id for r in recs) == ids
    assert {(r.status, r.completion_tokens, r.chunks, r.prompt_tokens) for r in recs} == {
        ("ok", 10, 5, 30)
    }
    # run.json in every run's shape: the target, seed and a one-group scenario of the request.
    manifest = orjson.loads((out / "run.json").read_bytes())
    assert manifest["target"]["url"] == srv.url and manifest["target"]["kind"] == "external"
    assert (manifest["model"], manifest["scenario"]["name"], manifest["seed_source"]) == (
        "paced",
        "request",
        "fresh",
    )
    assert {"tool_version", "started_wall", "finished_wall"} <= set(manifest)
    assert manifest["interrupted"] is False and manifest["planned_streams"] == 3
    (group,) = manifest["scenario"]["groups"]
    assert (group["name"], group["count"], group["max_tokens"]) == ("request", 3, 10)
    assert group["prompt"] == {
        "tokens": 30,
        "shape": "prose",
        "cache": "salted",
        "prefix_tokens": None,
        "file": None,
        "depth": None,
        "dataset": None,
    }
    assert manifest["scenario"]["arrival"] == {
        "kind": "closed",
        "concurrency": 2,
        "count": 3,
        "duration_s": None,
    }
