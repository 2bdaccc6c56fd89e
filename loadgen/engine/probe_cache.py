"""The sized warm pair against one server: is this boot's prefix cache alive?

A prompt of at least MIN_PROBE_BLOCKS x block size tokens goes out twice, each time with its own
short tail (seed 000, "Cache-dead boots": a probe spanning one block or less reuses nothing even
on a healthy boot). The judgement is engine/cache.py's: warm TTFT under half of cold and a
prefix-hit counter that moved. The block size comes from the server (a flag, its
`vllm:cache_config_info`, its boot log), never from a constant here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from loadgen.client.errors import HTTPStatusError
from loadgen.client.openai import OpenAIClient
from loadgen.engine.cache import MIN_PROBE_BLOCKS, CacheCheck, prime_and_verify, probe_blind_reason
from loadgen.engine.counters import pick_counter
from loadgen.engine.poller import parse_exposition
from loadgen.records import StreamRecord
from loadgen.request import StreamRequest
from loadgen.scenario.plan import PromptSpec, derive_seed
from loadgen.scenario.prompts import PromptBuilder
from loadgen.server.bootlog import parse_cache_config_info

# Each send adds this many tokens of its own after the shared prompt: the second send is a new
# request that can only be fast through the cache, never a byte-identical repeat.
PROBE_TAIL_TOKENS = 16
PROBE_GROUP = "cache-probe"
# The default probe is at least this long (rounded up to whole blocks) as well as 10 blocks:
# with small blocks, 10 of them prefill inside one step's fixed cost, and the cold/warm TTFT
# ratio cannot show even though the hit counter moves (the sim's block of 16: 17 ms vs 12 ms).
MIN_DEFAULT_PROBE_TOKENS = 2048


class ProbeRefused(ValueError):
    """The probe cannot tell a live cache from a dead one; the message says why."""


@dataclass(frozen=True, slots=True)
class ProbeSize:
    tokens: int
    block_size: int
    block_size_source: str


def probe_size(tokens: int | None, block_size: int | None, source: str | None) -> ProbeSize:
    """The probe's length: `tokens`, or by default MIN_PROBE_BLOCKS blocks and at least
    MIN_DEFAULT_PROBE_TOKENS in whole blocks. Raises ProbeRefused when the block size is unknown
    or the probe spans fewer than MIN_PROBE_BLOCKS blocks."""
    if block_size is None:
        raise ProbeRefused(
            "cache probe refused: the server's block size is unknown (not in its "
            "vllm:cache_config_info nor boot log); pass --block-size N"
        )
    size = tokens if tokens is not None else default_probe_tokens(block_size)
    blind = probe_blind_reason(size, block_size)
    if blind:
        raise ProbeRefused(f"cache probe refused: {blind}; use --tokens >= "
                           f"{MIN_PROBE_BLOCKS * block_size}")  # fmt: skip
    return ProbeSize(size, block_size, source or "flags")


def default_probe_tokens(block_size: int) -> int:
    blocks = max(MIN_PROBE_BLOCKS, -(-MIN_DEFAULT_PROBE_TOKENS // block_size))
    return blocks * block_size


def block_size_from_metrics(metrics_text: str) -> int | None:
    return parse_cache_config_info(metrics_text).get("block_size")


def probe_line(check: CacheCheck) -> str:
    """One line: healthy or dead, the probe's size in blocks, and the evidence."""
    state = "healthy" if check.warm else "DEAD"
    blocks = check.probe_tokens // check.block_size if check.block_size else 0
    return (
        f"cache {state}: probe {check.probe_tokens} tokens = {blocks} blocks of "
        f"{check.block_size} (block size from {check.block_size_source}); {check.reason}"
    )


async def probe_cache(
    client: OpenAIClient,
    *,
    model: str,
    size: ProbeSize,
    salt: str,
    api: str = "completions",
    on_record: Callable[[StreamRecord], None] | None = None,
) -> CacheCheck:
    """Runs the sized warm pair on an open OpenAIClient. `salt` opens the prompt and is the
    request's cache_salt: a new salt per probe keeps the first send cold."""
    counter = await pick_counter(
        client, model, chat=api == "chat", chat_template_kwargs=None, warn=lambda _msg: None
    )
    builder = PromptBuilder(counter)

    async def send(phase: str) -> StreamRecord:
        spec = PromptSpec(
            tokens=size.tokens + PROBE_TAIL_TOKENS, shape="prose", cache="primed", salt=salt,
            text_seed=derive_seed(salt, phase), prefix_key=salt, prefix_tokens=size.tokens,
            prefix_seed=derive_seed(salt, "prefix"),
        )  # fmt: skip
        built = await builder.build(spec)
        req = StreamRequest(
            id=f"{PROBE_GROUP}-{phase}", model=model, prompt=built.text, max_tokens=1,
            api=api, group=PROBE_GROUP, cache_salt=salt, phase=phase,  # type: ignore[arg-type]
            t_intended_ns=time.perf_counter_ns() - client.run_start_ns,
            requested_prompt_tokens=spec.tokens,
        )  # fmt: skip
        rec = await client.stream(req)
        if on_record is not None:
            on_record(rec)
        return rec

    async def read_hits() -> float | None:
        try:
            text = await client.get_text("/metrics")
        except HTTPStatusError:
            return None  # no /metrics: TTFT alone, and the verdict says so
        return parse_exposition(text).values.get("prefix_cache_hits_total")

    return await prime_and_verify(
        group=PROBE_GROUP, rep=0, prefix_key=salt, probe_tokens=size.tokens,
        block_size=size.block_size, block_size_source=size.block_size_source,
        send=send, read_hits=read_hits,
    )  # fmt: skip
