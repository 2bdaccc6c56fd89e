"""Prompt text: exact sizes, determinism, salts at the very start, shared prefixes."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re

import pytest

from loadgen.scenario.model import Group, PromptConfig, Scenario
from loadgen.scenario.plan import PromptSpec, plan
from loadgen.scenario.prompts import (
    EstimateCounter,
    PromptBuilder,
    WordCounter,
    build_prompt,
    salt_tag,
)
from loadgen.scenario.textgen import text_chunks
from loadgen.scenario.token_counter import PromptSizeError

from support.paths import DATA

_WORD = re.compile(r"\w+|[^\w\s]")


class ChunkyCounter:
    """Exact, but a word of n letters is ceil(n / 3) tokens: pieces worth several tokens."""

    method = "local"

    async def count(self, text: str) -> int:
        return sum(math.ceil(len(t) / 3) for t in _WORD.findall(text))


def spec(tokens: int, shape: str = "prose", seed: int = 1, **kw) -> PromptSpec:
    return PromptSpec(tokens, shape, "salted", "amber-falcon-quiet-river", seed, **kw)


def specs_of(cache: str, count: int, tokens: int = 600, prefix: int | None = None) -> list:
    prompt = PromptConfig(tokens, "prose", cache, prefix)
    s = Scenario(name="t", seed=5, groups=(Group("g", count, prompt, max_tokens=4),))
    (rep,) = plan(s).arms[0].reps
    return [r.prompt for r in rep.requests] + list(rep.primes)


@pytest.mark.parametrize("counter", [WordCounter(), ChunkyCounter(), EstimateCounter()])
@pytest.mark.parametrize("shape", ["prose", "code"])
@pytest.mark.parametrize("tokens", [16, 17, 100, 257, 4096])
async def test_prompt_hits_the_count_exactly(counter, shape: str, tokens: int) -> None:
    built = await build_prompt(spec(tokens, shape), counter)
    assert built.tokens == tokens == await counter.count(built.text)
    assert built.method == counter.method


async def test_file_shape_is_sized_from_the_file() -> None:
    source = DATA / "prompt_source.txt"
    built = await build_prompt(spec(300, "file", file=str(source)), WordCounter())
    assert built.tokens == 300
    assert "The ledger opened at dawn" in built.text


async def test_same_spec_same_text_other_seed_other_text() -> None:
    counter = WordCounter()
    for shape in ("prose", "code"):
        one = await build_prompt(spec(2000, shape), counter)
        two = await build_prompt(spec(2000, shape), counter)
        other = await build_prompt(spec(2000, shape, seed=2), counter)
        assert one.text == two.text
        assert other.text != one.text
        assert other.text.split("\n\n")[0] == one.text.split("\n\n")[0]  # the same tag


async def test_salted_prompts_differ_at_the_first_token() -> None:
    specs = specs_of("salted", 50)
    builder = PromptBuilder(WordCounter())
    texts = [(await builder.build(s)).text for s in specs]
    assert all(t.startswith(salt_tag(s.salt)) for t, s in zip(texts, specs, strict=True))
    first_tokens = {_WORD.match(t).group() for t in texts}
    assert len(first_tokens) == 50


async def test_shared_prompts_share_the_prefix_exactly() -> None:
    (*streams,) = specs_of("shared", 3, tokens=600, prefix=500)
    builder = PromptBuilder(WordCounter())
    built = [await builder.build(s) for s in streams]
    prefix = built[0].text[: built[0].prefix_chars]
    assert await WordCounter().count(prefix) == 500
    assert prefix.startswith(salt_tag(streams[0].salt))
    for b in built:
        assert b.tokens == 600
        assert b.text[: b.prefix_chars] == prefix
    assert len({b.text[b.prefix_chars :] for b in built}) == 3  # own tails


async def test_primed_prefix_text_is_the_prefix_of_every_stream() -> None:
    whale, prime = specs_of("primed", 1, tokens=3000)
    assert (prime.tokens, prime.prefix_tokens) == (3000 - 64, 3000 - 64)
    fresh = PromptBuilder(WordCounter())
    primed = await fresh.build(prime)
    stream = await PromptBuilder(WordCounter()).build(whale)
    assert (primed.tokens, stream.tokens) == (3000 - 64, 3000)
    assert stream.text.startswith(primed.text)
    assert primed.prefix_chars == len(primed.text)


async def test_whale_is_built_in_few_counts() -> None:
    # The search, not the clock, is what a test can hold: a 72.6k whale in at most 12
    # tokenizer counts (about 0.2 s on an idle core).
    builder = PromptBuilder(WordCounter())
    built = await builder.build(spec(72_600))
    assert built.tokens == 72_600
    assert builder.count_calls <= 12


@pytest.mark.parametrize("tokens", [500, 4096, 20_000])
async def test_count_calls_stay_logarithmic_with_multi_token_pieces(tokens: int) -> None:
    builder = PromptBuilder(ChunkyCounter())
    built = await builder.build(spec(tokens, "code"))
    assert built.tokens == tokens
    assert builder.count_calls <= 16


@pytest.mark.parametrize(("tokens", "text"), [(1, "amber\n\n"), (2, "amber falcon\n\n"),
                                             (3, "amber falcon quiet\n\n")])  # fmt: skip
async def test_a_prompt_shorter_than_its_tag_keeps_the_tag_words_that_fit(
    tokens: int, text: str
) -> None:
    # `loadgen request --prompt-tokens 1`: its salt's first words, the whole salt in cache_salt.
    built = await build_prompt(dataclasses.replace(spec(16), tokens=tokens), WordCounter())
    assert (built.text, built.tokens) == (text, tokens)
    whole = await build_prompt(dataclasses.replace(spec(16), tokens=4), WordCounter())
    assert whole.text == salt_tag("amber-falcon-quiet-river")


async def test_a_prompt_shorter_than_its_first_tag_word_is_refused() -> None:
    # "amber" is two tokens to this counter: no word of the tag fits in one.
    with pytest.raises(PromptSizeError, match="1 tokens requested but the fixed start alone is 2"):
        await build_prompt(dataclasses.replace(spec(16), tokens=1), ChunkyCounter())


def test_generators_look_like_their_shape() -> None:
    prose = "".join(part for part, _ in zip(text_chunks("prose", 3), range(30), strict=False))
    code = "".join(part for part, _ in zip(text_chunks("code", 3), range(5), strict=False))
    assert prose[0].isupper() and prose.count(". ") > 5 and "\n\n" in prose
    assert re.search(r"^def \w+\(", code, re.M) or re.search(r"^class \w+:", code, re.M)
    assert "\n    " in code and "{" in code and "return " in code
    assert code != "".join(p for p, _ in zip(text_chunks("code", 4), range(5), strict=False))


def test_prose_is_the_same_text_in_any_chunking() -> None:
    # Prose is yielded a sentence at a time (a short prompt generates one or two, not a whole
    # paragraph); the first 20,000 characters of seed 3 are those whole paragraphs gave.
    chunks, text = text_chunks("prose", 3), ""
    while len(text) < 20_000:
        text += next(chunks)
    digest = hashlib.sha256(text[:20_000].encode()).hexdigest()
    assert digest == "58c8a52c47a7a4b65a54741c341cd43ce2367add94c4419b4648ff5986833546"


async def test_a_counter_that_never_grows_is_refused() -> None:
    class Stuck:
        method = "estimate"

        async def count(self, text: str) -> int:
            return 4

    with pytest.raises(PromptSizeError, match="characters still count 4 tokens"):
        await build_prompt(spec(100), Stuck())
