"""Prompts of a chosen token length, sized against the server's own tokenizer when it has one.

The filler is deterministic (seeded by the stream index, never the clock) and differs from the
first word on between streams: prefix caches chain block hashes from the start, so no stream
can hit another's cached blocks. Every word is short and common, about one token each.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from loadgen.client.openai import ClientError, OpenAIClient, ServerUnreachable

_FILLER = (
    "the of and to in is was for on that with as by at from his her they have are this "
    "had not but were which be one all their would there been has when who will more no "
    "out so said what up its about into than them can only other new some could time "
    "these two may then first any like now my such make over our even most after also "
    "made many before must well back through years where much your way down should "
    "because each just those people how too little state good very world still own "
    "see men work long get here between both life being under never day same another know "
    "while last might us great old year off come since against go came right used take"
)
FILLER_WORDS = tuple(_FILLER.split())
MAX_PROBES = 24

Counter = Callable[[str], Awaitable[int]]


@dataclass(frozen=True)
class SizedPrompt:
    text: str
    tokens: int  # the server's count, or the estimate
    exact: bool  # counted by the server's /tokenize, not estimated


def filler_text(index: int, n_words: int) -> str:
    """The first `n_words` words of stream `index`'s filler (a prefix of any longer one)."""
    rng = random.Random(f"loadgen-filler-{index}")
    return " ".join(rng.choice(FILLER_WORDS) for _ in range(max(n_words, 1)))


async def find_counter(client: OpenAIClient, model: str) -> tuple[Counter, str] | None:
    """A token counter backed by the server's /tokenize and its dialect, or None without one.

    vLLM takes {"prompt": ...} and answers count/tokens; llama.cpp takes {"content": ...}."""

    async def vllm(text: str) -> int:
        out = await client.post_json("/tokenize", {"model": model, "prompt": text})
        return int(out["count"]) if "count" in out else len(out["tokens"])

    async def llamacpp(text: str) -> int:
        return len((await client.post_json("/tokenize", {"content": text}))["tokens"])

    for counter, name in ((vllm, "vllm"), (llamacpp, "llama.cpp")):
        try:
            await counter("hello world")
        except ServerUnreachable:
            raise
        except (ClientError, KeyError, TypeError, ValueError):
            continue  # no /tokenize, or another dialect's
        return counter, name
    return None


async def size_prompt(count: Counter, index: int, target: int, guess_words: int) -> SizedPrompt:
    """The longest filler of stream `index` with at most `target` tokens (exactly `target`
    unless no word count gives it), by secant steps then bisection on the word count."""
    below: tuple[int, int] | None = None  # (words, tokens) with tokens <= target
    above: int | None = None  # words giving tokens > target
    words = max(guess_words, 1)
    for _ in range(MAX_PROBES):
        n = await count(filler_text(index, words))
        if n == target:
            return SizedPrompt(filler_text(index, words), n, exact=True)
        if n < target:
            below = (words, n) if below is None or words > below[0] else below
        else:
            above = words if above is None or words < above else above
        if below and above is not None:
            if above - below[0] <= 1:
                break
            words = (below[0] + above) // 2
        elif above is None:
            words = max(words + 1, round(words * target / max(n, 1)))
        else:
            words = min(words - 1, round(words * target / n))
            if words < 1:
                break
    if below is None:
        text = filler_text(index, 1)
        return SizedPrompt(text, await count(text), exact=True)
    return SizedPrompt(filler_text(index, below[0]), below[1], exact=True)


def estimated_prompt(index: int, target: int) -> SizedPrompt:
    """Without a tokenizer: one token per filler word, a label saying it is an estimate."""
    return SizedPrompt(filler_text(index, target), target, exact=False)


async def sized_prompts(
    client: OpenAIClient, model: str, count: int, target: int
) -> tuple[list[SizedPrompt], str]:
    """`count` distinct prompts of about `target` tokens and how they were sized."""
    found = await find_counter(client, model)
    if found is None:
        return [estimated_prompt(i, target) for i in range(count)], "estimated"
    counter, dialect = found
    out: list[SizedPrompt] = []
    guess = target
    for i in range(count):
        sized = await size_prompt(counter, i, target, guess)
        guess = len(sized.text.split())
        out.append(sized)
    return out, f"exact, sized by /tokenize ({dialect})"
