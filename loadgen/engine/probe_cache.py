"""The sized warm pair against one server: is this boot's prefix cache alive, and right?

A prompt of at least MIN_PROBE_BLOCKS x block size tokens goes out twice, each time with its own
short tail (seed 000, "Cache-dead boots": a probe spanning one block or less reuses nothing even
on a healthy boot), then the first prompt once more under greedy decoding (its answer must equal
the first's). Its length comes from the server's own speed: a 16-token request's TTFT is the
floor, and the probe grows until its cold TTFT is FLOOR_MULTIPLE x that floor (a 2048-token
probe on an H200 prefilled in ~50 ms, inside the noise). The judgement is engine/cache.py's.
The block size comes from the server (a flag, its `vllm:cache_config_info`, its boot log),
never from a constant here.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import cast

from loadgen.analysis.rates import ttft_s
from loadgen.client.errors import HTTPStatusError
from loadgen.client.openai import OpenAIClient
from loadgen.engine.cache import (
    ANSWER_TOKENS,
    FLOOR_MULTIPLE,
    GREEDY,
    MIN_PROBE_BLOCKS,
    prime_and_verify,
    probe_blind_reason,
)
from loadgen.engine.counters import pick_counter
from loadgen.exposition import parse_exposition
from loadgen.records import StreamRecord
from loadgen.request import StreamRequest
from loadgen.run_manifest import CacheCheck
from loadgen.scenario.plan import PromptSpec, derive_seed
from loadgen.scenario.prompts import PromptBuilder
from loadgen.server.bootlog import parse_cache_config_info

# Each send adds this many tokens of its own after the shared prompt: the second send is a new
# request that can only be fast through the cache, never a byte-identical repeat.
PROBE_TAIL_TOKENS = 16
PROBE_GROUP = "cache-probe"
# The probe starts at least this long (rounded up to whole blocks) as well as 10 blocks: with
# small blocks, 10 of them prefill inside one step's fixed cost (the sim's block of 16: 17 ms
# vs 12 ms); from there it grows with the server's measured prefill.
MIN_DEFAULT_PROBE_TOKENS = 2048
# The TTFT floor's request: a prompt this short prefills in one step on any server.
FLOOR_TOKENS = 16
# The longest probe loadgen sizes or accepts (--tokens above it is refused): 128k tokens cover
# the H200's 32k probe (1.37 s cold) four times over.
MAX_PROBE_TOKENS = 131_072
# One sizing step grows the probe at most this much: prefill is superlinear in depth, so a
# longer jump overshoots.
GROWTH_CAP = 8


class ProbeRefused(ValueError):
    """The probe cannot tell a live cache from a dead one; the message says why."""


@dataclass(frozen=True, slots=True)
class ProbeSize:
    tokens: int
    block_size: int
    block_size_source: str
    # tokens came from --tokens: the probe measures the floor but does not grow.
    fixed: bool = False
    # The longest probe this server takes: MAX_PROBE_TOKENS or its window, in whole blocks.
    limit: int = MAX_PROBE_TOKENS


def probe_size(
    tokens: int | None, block_size: int | None, source: str | None, window: int | None = None
) -> ProbeSize:
    """The probe's starting length: `tokens`, or by default MIN_PROBE_BLOCKS blocks and at least
    MIN_DEFAULT_PROBE_TOKENS in whole blocks; `window` is the server's max_model_len. Raises
    ProbeRefused when the block size is unknown or the probe spans fewer than MIN_PROBE_BLOCKS
    blocks or more than the limit."""
    if block_size is None:
        raise ProbeRefused(
            "cache probe refused: the server's block size is unknown (not in its "
            "vllm:cache_config_info nor boot log); pass --block-size N"
        )
    limit = probe_limit(block_size, window)
    if limit < MIN_PROBE_BLOCKS * block_size:
        raise ProbeRefused(
            f"cache probe refused: block size {block_size} ({source}) x {MIN_PROBE_BLOCKS} "
            f"blocks exceeds the longest probe of {limit} tokens (max {MAX_PROBE_TOKENS}, "
            f"model window {window})"
        )
    if tokens is not None and tokens > limit:
        raise ProbeRefused(
            f"cache probe refused: --tokens {tokens} exceeds the longest probe of {limit} "
            f"tokens (max {MAX_PROBE_TOKENS}, model window {window})"
        )
    size = tokens if tokens is not None else min(limit, default_probe_tokens(block_size))
    blind = probe_blind_reason(size, block_size)
    if blind:
        raise ProbeRefused(f"cache probe refused: {blind}; use --tokens >= "
                           f"{MIN_PROBE_BLOCKS * block_size}")  # fmt: skip
    return ProbeSize(size, block_size, source or "flags", tokens is not None, limit)


def check_probe_flags(tokens: int | None, block_size: int | None) -> None:
    """Refuses, before anything is sent, flags no probe can honour (one line naming the flag
    and its limit)."""
    if tokens is not None and tokens > MAX_PROBE_TOKENS:
        raise ProbeRefused(f"cache probe refused: --tokens {tokens} is above the limit of "
                           f"{MAX_PROBE_TOKENS}")  # fmt: skip
    most = MAX_PROBE_TOKENS // MIN_PROBE_BLOCKS
    if block_size is not None and block_size > most:
        raise ProbeRefused(f"cache probe refused: --block-size {block_size} is above the limit "
                           f"of {most} ({MIN_PROBE_BLOCKS} blocks must fit {MAX_PROBE_TOKENS} "
                           "tokens)")  # fmt: skip


def probe_limit(block_size: int, window: int | None) -> int:
    """MAX_PROBE_TOKENS, or what fits the model window beside the tail and the answer, in
    whole blocks."""
    room = MAX_PROBE_TOKENS
    if window is not None:
        room = min(room, window - PROBE_TAIL_TOKENS - ANSWER_TOKENS)
    return max(0, room) // block_size * block_size


def default_probe_tokens(block_size: int) -> int:
    blocks = max(MIN_PROBE_BLOCKS, -(-MIN_DEFAULT_PROBE_TOKENS // block_size))
    return blocks * block_size


def next_probe_tokens(tokens: int, cold_s: float, floor_s: float, size: ProbeSize) -> int | None:
    """The next length to try after a cold TTFT of `cold_s` at `tokens`, or None when that
    one stands FLOOR_MULTIPLE x above the floor or the limit is reached. The step assumes
    prefill time proportional to tokens (x 1.25 margin), between 2x and GROWTH_CAP x."""
    target = FLOOR_MULTIPLE * floor_s
    if cold_s >= target or tokens >= size.limit:
        return None
    prefill = max(cold_s - floor_s, 1e-9)
    factor = min(GROWTH_CAP, max(2.0, 1.25 * (target - floor_s) / prefill))
    blocks = -(-int(tokens * factor) // size.block_size)
    return min(size.limit, blocks * size.block_size)


async def grow_probe(
    size: ProbeSize, floor_s: float, cold_ttft: Callable[[int], Awaitable[float | None]]
) -> int:
    """The probe length: from size.tokens, grown until a cold send stands far enough above
    the floor (or the limit stops it; the TTFT witness then says it is not telling)."""
    tokens = size.tokens
    while not size.fixed:
        cold = await cold_ttft(tokens)
        if cold is None:
            break  # a failed send: the pair will fail the same way and say so
        grown = next_probe_tokens(tokens, cold, floor_s, size)
        if grown is None:
            break
        tokens = grown
    return tokens


def block_size_from_metrics(metrics_text: str) -> int | None:
    return parse_cache_config_info(metrics_text).get("block_size")


def probe_line(check: CacheCheck) -> str:
    """One line: the verdict, the probe's size in blocks, the TTFT floor and the evidence."""
    state = {"healthy": "healthy", "dead": "DEAD", "mismatch": "WRONG ANSWERS",
             "inconclusive": "UNKNOWN"}[check.verdict]  # fmt: skip
    blocks = check.probe_tokens // check.block_size if check.block_size else 0
    floor = "" if check.floor_ttft_s is None else f"; TTFT floor {check.floor_ttft_s:.3f}s"
    return (
        f"cache {state}: probe {check.probe_tokens} tokens = {blocks} blocks of "
        f"{check.block_size} (block size from {check.block_size_source}){floor}; {check.reason}"
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
    """Measures the TTFT floor, sizes the probe and runs the warm pair and the greedy repeat on
    an open OpenAIClient. `salt` opens the prompt and is the request's cache_salt: a new salt
    per probe (and per sizing send) keeps each first send cold."""
    counter = await pick_counter(
        client, model, chat=api == "chat", chat_template_kwargs=None, warn=lambda _msg: None
    )
    builder = PromptBuilder(counter)

    async def stream(key: str, phase: str, tokens: int, prefix: int | None) -> StreamRecord:
        seed_phase = "prime" if phase in ("repeat", "control") else phase
        # `prefix and key` is 0 for a 0-token prefix, which build() takes for a key (it tests
        # for None): kept as it always was, only told to the type checker.
        spec = PromptSpec(
            tokens=tokens, shape="prose", cache="primed" if prefix else "cold", salt=key,
            text_seed=derive_seed(key, seed_phase), prefix_key=cast(str | None, prefix and key),
            prefix_tokens=prefix, prefix_seed=derive_seed(key, "prefix"),
        )  # fmt: skip
        built = await builder.build(spec)
        answer = phase in ("prime", "repeat", "control")
        req = StreamRequest(
            id=f"{PROBE_GROUP}-{key}-{phase}", model=model, prompt=built.text,
            max_tokens=ANSWER_TOKENS if answer else 1, api=api, group=PROBE_GROUP,  # type: ignore[arg-type]
            cache_salt=f"{key}-control" if phase == "control" else key,
            phase="probe" if phase == "size" else phase,
            t_intended_ns=time.perf_counter_ns() - client.run_start_ns,
            requested_prompt_tokens=spec.tokens, prompt_tokens_sent=built.tokens,
            keep_text=answer,
            extra_body=dict(GREEDY) if answer else {},
        )  # fmt: skip
        rec = await client.stream(req)
        if on_record is not None:
            on_record(rec)
        return rec

    floor_rec = await stream(f"{salt}-floor", "size", FLOOR_TOKENS, None)
    floor_s = ttft_s(floor_rec) if floor_rec.status == "ok" else None
    tokens = size.tokens
    if floor_s is not None:

        async def cold_ttft(n: int) -> float | None:
            rec = await stream(f"{salt}-size{n}", "size", n + PROBE_TAIL_TOKENS, None)
            return ttft_s(rec) if rec.status == "ok" else None

        tokens = await grow_probe(size, floor_s, cold_ttft)

    async def send(phase: str) -> StreamRecord:
        return await stream(salt, phase, tokens + PROBE_TAIL_TOKENS, tokens)

    async def read_hits() -> float | None:
        try:
            text = await client.get_text("/metrics")
        except HTTPStatusError:
            return None  # no /metrics: TTFT alone, and the verdict says so
        return parse_exposition(text).values.get("prefix_cache_hits_total")

    return await prime_and_verify(
        group=PROBE_GROUP, rep=0, prefix_key=salt, probe_tokens=tokens,
        block_size=size.block_size, block_size_source=size.block_size_source,
        send=send, read_hits=read_hits, floor_s=floor_s,
    )  # fmt: skip
