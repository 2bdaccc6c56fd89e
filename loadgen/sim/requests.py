"""One request's state inside the sim engine, and the record of what happened to it."""

from __future__ import annotations

import hashlib
import random
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from loadgen.needle import find_answer
from loadgen.sim.tokenizer import SimTokenizer, TextGenerator


@dataclass(slots=True)
class SimRequest:
    request_id: str
    prompt_token_ids: list[int]
    max_tokens: int
    min_tokens: int = 0
    ignore_eos: bool = False
    cache_salt: str | None = None
    arrival_s: float = 0.0  # engine time; a request is not scheduled before it
    # The answer's first tokens, fixed (a needle's code, loadgen/sim/needle.py); then generated.
    answer_prefix: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TokenOutput:
    request_id: str
    token_ids: tuple[int, ...]
    finished: bool
    finish_reason: str | None
    num_prompt_tokens: int
    num_cached_tokens: int
    completion_tokens_so_far: int


@dataclass(slots=True)
class RequestTruth:
    """What happened to one request, in engine seconds (ground_truth() rows)."""

    request_id: str
    arrival_s: float
    num_prompt_tokens: int
    admitted_s: list[float] = field(default_factory=list)
    prefill_chunks: list[tuple[int, float, float, int]] = field(default_factory=list)
    first_token_s: float | None = None
    preemptions: list[float] = field(default_factory=list)
    finished_s: float | None = None
    finish_reason: str | None = None
    num_cached_tokens: int = 0
    completion_tokens: int = 0
    # tokens_per_step as parallel arrays: a long soak makes millions of these.
    step_index: array = field(default_factory=lambda: array("q"))
    step_end_s: array = field(default_factory=lambda: array("d"))
    step_tokens: array = field(default_factory=lambda: array("i"))

    def to_dict(self) -> dict:
        return {
            "request_id": self.request_id,
            "arrival_s": self.arrival_s,
            "admitted_s": list(self.admitted_s),
            "prefill_chunks": list(self.prefill_chunks),
            "first_token_s": self.first_token_s,
            "preemptions": list(self.preemptions),
            "tokens_per_step": list(
                zip(self.step_index, self.step_end_s, self.step_tokens, strict=True)
            ),
            "finished_s": self.finished_s,
            "finish_reason": self.finish_reason,
            "num_prompt_tokens": self.num_prompt_tokens,
            "num_cached_tokens": self.num_cached_tokens,
            "completion_tokens": self.completion_tokens,
        }


class LiveRequest:
    """A request the engine still works on."""

    __slots__ = (
        "gen",
        "hashes",
        "id",
        "max_tokens",
        "num_computed",
        "num_spec",
        "prompt_len",
        "req",
        "spec_rng",
        "state",
        "tokens",
        "truth",
    )

    def __init__(self, req: SimRequest, seed: int, tokenizer: SimTokenizer) -> None:
        self.req = req
        self.id = req.request_id
        self.tokens = list(req.prompt_token_ids)
        self.prompt_len = len(self.tokens)
        self.max_tokens = req.max_tokens
        self.num_computed = 0
        self.num_spec = 0
        self.hashes: list[bytes] = []
        prompt_bytes = array("I", self.tokens).tobytes()
        self.gen: TextGenerator = tokenizer.generator(seed_of(seed, prompt_bytes))
        self.spec_rng = random.Random(seed_of(seed, req.request_id.encode()))
        self.state = "pending"
        self.truth = RequestTruth(req.request_id, req.arrival_s, self.prompt_len)


def seed_of(seed: int, data: bytes) -> int:
    """A stable 64-bit seed from the engine seed and some bytes (never the salted hash())."""
    digest = hashlib.blake2b(data, digest_size=8, key=seed.to_bytes(8, "little", signed=True))
    return int.from_bytes(digest.digest(), "little")


def asked_text(messages: Sequence[Mapping[str, Any]] | None, prompt: str | None) -> str | None:
    """The text a needle question ends: the prompt, or the last message's content."""
    if messages:
        content = messages[-1].get("content")
        return content if isinstance(content, str) else None
    return prompt


def needle_answer(prompt: str | None, tokenizer: SimTokenizer, miss: float) -> tuple[int, ...]:
    """The answer's first tokens for a needle question (loadgen/needle.py): the planted code,
    unless the `needle_miss` fault strikes (drawn from the prompt's own bytes, so a rerun misses
    the same prompts whatever the arrival order); () for any other prompt."""
    code = find_answer(prompt) if prompt else None
    if code is None or prompt is None:
        return ()
    if miss > 0 and random.Random(seed_of(0, prompt.encode())).random() < miss:
        return tuple(tokenizer.encode(" I do not know."))
    return tuple(tokenizer.encode(" " + code))
