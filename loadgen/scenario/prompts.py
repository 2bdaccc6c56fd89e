"""Prompt text built to an exact token count.

Layout: a salted prompt is `tag(salt)` + body; a shared or primed prompt is the prefix
(`tag(salt)` + prefix body, exactly `prefix_tokens` long) + a per-stream tail. The tag is the
salt's words, at the very start, so two prompts with different salts differ at their first token
and no cached block can match.

Sizing: generate more text than needed (linear time), count the whole once, then search the cut
point on piece boundaries (a piece is a word or a punctuation mark with its leading space):
secant steps on the token count, falling back to bisection when a step does not halve the
error. If the best cut lands one or two tokens short (a piece worth several tokens), short
filler pieces are appended one at a time. With an exact counter the result is exact; typically
4-8 count() calls for any size. The text depends only on the spec and on the counter's answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import cast

from loadgen import needle
from loadgen.scenario.blocks import BlockComposer
from loadgen.scenario.plan import PromptSpec, derive_seed
from loadgen.scenario.textgen import text_chunks
from loadgen.scenario.token_counter import PromptSizeError, TokenCounter

_PIECE_RE = re.compile(r"\s*(?:\w+|[^\w\s])")
_WORD_RE = re.compile(r"\w+|[^\w\s]")
_FILLERS = (" a", ",", " the", ".", " x")
_MAX_PAD_CALLS = 12
_MAX_GROWTHS = 6
# First guess at characters per token, before the counter has answered for a shape; the text
# is extended when it falls short.
_CHARS_PER_TOKEN = 5.0
# Once learned, text is generated this much past the target at the density seen last: enough
# that a second count (a growth) is rare, not so much that generating and counting the surplus
# dominates (a 5-char guess was twice the text a sim-tokenized prompt needs).
_DENSITY_MARGIN = 1.2
_MIN_SURPLUS_CHARS = 64


class EstimateCounter:
    """No tokenizer at hand: one token per four characters, rounded up."""

    method = "estimate"

    async def count(self, text: str) -> int:
        return math.ceil(len(text) / 4)


class WordCounter:
    """An exact counter for a simple tokenizer: every word and every punctuation mark is one
    token. For tests, and for a simulated server that tokenizes the same way."""

    method = "local"

    async def count(self, text: str) -> int:
        return len(_WORD_RE.findall(text))


@dataclass(frozen=True, slots=True)
class BuiltPrompt:
    """`tokens` is the counter's count of `text` (equal to the spec's unless the counter's
    granularity made that impossible); `prefix_chars` is the length of the shared prefix.
    `asked` is what was asked for: the spec's size, or for a dataset row the counter's count
    of the row's own text (`tokens` adds its salt tag)."""

    text: str
    tokens: int
    method: str
    prefix_chars: int = 0
    asked: int | None = None


def salt_tag(salt: str) -> str:
    """The text that opens every prompt with this salt."""
    return salt.replace("-", " ") + "\n\n"


async def build_prompt(spec: PromptSpec, counter: TokenCounter) -> BuiltPrompt:
    """The prompt for one spec (builds its prefix too; PromptBuilder reuses prefixes)."""
    return await PromptBuilder(counter).build(spec)


class PromptBuilder:
    """Builds prompts with one counter, building each shared prefix once."""

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self.count_calls = 0
        self._prefixes: dict[tuple[str, int], tuple[str, int]] = {}
        # Prompts may be sized concurrently (engine/materialize.py): a prefix is fitted once
        # while the builds that need it wait, not once by each of them.
        self._fitting_prefix = asyncio.Lock()
        self._files: dict[str, str] = {}
        self._blocks: BlockComposer | None = None
        # Characters per token of each text shape, as the counter last counted it; held still
        # while prompts are sized concurrently (density_held).
        self._density: dict[str, float] = {}
        self._learning_density = True

    async def build(self, spec: PromptSpec) -> BuiltPrompt:
        method = self.counter.method
        if spec.text is not None:
            return await self._row_prompt(spec, spec.text)
        if spec.blocks is not None:
            return await self._block_prompt(spec)
        if spec.needle_key is not None:
            return await self._needle_prompt(spec, spec.needle_key)
        if spec.prefix_key is None or spec.prefix_tokens is None:
            chunks = self._chunks(spec, spec.text_seed)
            tag, tag_tokens = await self._tag_that_fits(spec.salt, spec.tokens)
            text, tokens = await self._fit(tag, tag_tokens, chunks, spec.tokens, spec.shape)
            return BuiltPrompt(text, tokens, method)
        prefix, prefix_tokens = await self._prefix(spec, spec.prefix_key, spec.prefix_tokens)
        if spec.tokens <= spec.prefix_tokens:
            return BuiltPrompt(prefix, prefix_tokens, method, len(prefix))
        tail = _separated(self._chunks(spec, spec.text_seed))
        text, tokens = await self._fit(prefix, prefix_tokens, tail, spec.tokens, spec.shape)
        return BuiltPrompt(text, tokens, method, len(prefix))

    async def _row_prompt(self, spec: PromptSpec, row: str) -> BuiltPrompt:
        """A dataset row as written, after its salt tag when salted; both counted."""
        asked = await self.count(row) if row else 0
        if spec.cache != "salted":
            return BuiltPrompt(row, asked, self.counter.method, asked=asked)
        text = salt_tag(spec.salt) + row
        return BuiltPrompt(text, await self.count(text), self.counter.method, asked=asked)

    async def _tag_that_fits(self, salt: str, tokens: int) -> tuple[str, int]:
        """The salt's tag and its count; for a prompt shorter than the whole tag (`loadgen
        request --prompt-tokens 1`), its longest leading run of words that fits. The first word
        alone still tells apart the first len(SALT_WORDS) = 812 prompts of a plan, a prompt
        that short fills no cache block of a server that caches whole blocks (vLLM: 16
        tokens), and the whole salt still goes out as cache_salt. A tag that fits costs the
        one count _fit would make of it."""
        words = salt.split("-")
        for n in range(len(words), 1, -1):
            tag = salt_tag("-".join(words[:n]))
            count = await self.count(tag)
            if count <= tokens:
                return tag, count
        tag = salt_tag(words[0])
        return tag, await self.count(tag)

    async def _block_prompt(self, spec: PromptSpec) -> BuiltPrompt:
        """The trace row's blocks (one text per block id, from the salt and the id), then its
        own tail; `prefix_chars` spans the blocks."""
        if self._blocks is None:
            self._blocks = BlockComposer(self.counter)
        composer = self._blocks
        await composer.learn()
        size = spec.block_tokens or 0
        ids = spec.blocks or ()
        head = "".join(composer.compose(size, derive_seed(spec.salt, "block", h)) for h in ids)
        tail_tokens = max(spec.tokens - len(ids) * size - composer.overhead, 0)
        text = head + composer.compose(tail_tokens, spec.text_seed)
        tokens = len(ids) * size + tail_tokens + composer.overhead
        await composer.verify(text, tokens)
        return BuiltPrompt(text, tokens, self.counter.method, len(head))

    async def _needle_prompt(self, spec: PromptSpec, key: str) -> BuiltPrompt:
        """Salted prose with the needle's fact planted at `needle_depth` of the text (at the
        next word boundary) and its question at the end; the prose is sized so the whole
        counts `spec.tokens` give or take the tokens a splice joins or splits (one or two)."""
        planted = " " + needle.fact(key, needle.needle_code(spec.text_seed))
        asked = needle.question(key)
        extra = await self.count(planted + asked)
        head = salt_tag(spec.salt)
        head_tokens = await self.count(head)
        body_tokens = max(spec.tokens - extra, head_tokens + 1)
        chunks = text_chunks("prose", spec.text_seed)
        text, _ = await self._fit(head, head_tokens, chunks, body_tokens, "prose")
        at = len(head) + round((spec.needle_depth or 0.0) * (len(text) - len(head)))
        cut = text.find(" ", at)
        cut = len(text) if cut < 0 else cut
        whole = text[:cut] + planted + text[cut:] + asked
        return BuiltPrompt(whole, await self.count(whole), self.counter.method)

    async def _prefix(self, spec: PromptSpec, prefix_key: str, tokens: int) -> tuple[str, int]:
        key = (prefix_key, tokens)
        async with self._fitting_prefix:
            if key not in self._prefixes:
                # Every spec with a prefix_key (plan.py's, the cache probe's) has its prefix_seed.
                chunks = self._chunks(spec, cast(int, spec.prefix_seed))
                self._prefixes[key] = await self._fit(
                    salt_tag(spec.salt), None, chunks, tokens, spec.shape
                )
        return self._prefixes[key]

    def _chunks(self, spec: PromptSpec, seed: int) -> Iterator[str]:
        if spec.shape != "file":
            return text_chunks(spec.shape, seed)
        file = spec.file
        # Shape "file" is `shape: {file: PATH}` in a scenario: it always names one.
        assert file is not None
        if file not in self._files:
            self._files[file] = Path(file).read_text(encoding="utf-8")
        return text_chunks("file", seed, self._files[file])

    @contextlib.contextmanager
    def density_held(self) -> Iterator[None]:
        """Prompts built inside start from the density learned before, whatever order their
        counts are answered in: a prompt's text then depends on its own counts only, as it
        does one prompt at a time, where the density each starts from is the last one's."""
        self._learning_density = False
        try:
            yield
        finally:
            self._learning_density = True

    async def count(self, text: str) -> int:
        """The counter's count, tallied in `count_calls`."""
        self.count_calls += 1
        return await self.counter.count(text)

    async def _fit(
        self, head: str, head_tokens: int | None, chunks: Iterator[str], target: int, shape: str
    ) -> tuple[str, int]:
        """head + the longest run of pieces from `chunks` that counts `target` tokens. Where the
        count grows with every piece (a tokenizer's words), one cut fits: the result is the
        chunks' and the counter's answers'. Where it may not (the estimate's 4-character
        rounding), the cut found also depends on how much text is generated first, so on the
        density learned from the prompts fitted before."""
        if head_tokens is None:
            head_tokens = await self.count(head)
        if head_tokens > target:
            raise PromptSizeError(
                f"{target} tokens requested but the fixed start alone is {head_tokens}"
            )
        if head_tokens == target:
            return head, target
        body = _Pieces(chunks, self._chars_wanted(shape, target - head_tokens))
        full = await self.count(head + body.text)
        for _ in range(_MAX_GROWTHS):
            if full > target:
                break
            # Aim 25% past the target at the density seen so far, at most 4x per step.
            factor = min((target - head_tokens) / max(full - head_tokens, 1) * 1.25, 4.0)
            body.extend(int(len(body.text) * (factor - 1)) + 64)
            full = await self.count(head + body.text)
        else:
            raise PromptSizeError(f"{len(body.text):,} characters still count {full} tokens")
        if self._learning_density:
            self._density[shape] = len(body.text) / (full - head_tokens)
        lo, lo_count, hi, hi_count = 0, head_tokens, len(body), full
        error, secant = math.inf, True
        while hi - lo > 1:
            k = body.secant(lo, lo_count, hi, hi_count, target) if secant else (lo + hi) // 2
            c = await self.count(head + body.prefix(k))
            if c == target:
                return head + body.prefix(k), c
            if c < target:
                lo, lo_count = k, c
            else:
                hi, hi_count = k, c
            # Keep secant steps while they at least halve the error; else bisect once.
            secant = not secant or abs(c - target) * 2 <= error
            error = abs(c - target)
        return await self._pad(head + body.prefix(lo), lo_count, target)

    def _chars_wanted(self, shape: str, tokens: int) -> int:
        """Characters to generate for `tokens` tokens of `shape`: past the learned density."""
        learned = self._density.get(shape)
        if learned is None:
            return math.ceil(tokens * _CHARS_PER_TOKEN)
        return math.ceil(tokens * learned * _DENSITY_MARGIN) + _MIN_SURPLUS_CHARS

    async def _pad(self, text: str, tokens: int, target: int) -> tuple[str, int]:
        """Short fillers appended until the count is exact (or the calls run out)."""
        calls = 0
        while tokens < target and calls < _MAX_PAD_CALLS:
            for filler in _FILLERS:
                calls += 1
                c = await self.count(text + filler)
                if c <= target:
                    text, tokens = text + filler, c
                    break
            else:
                break
        return text, tokens


def _separated(chunks: Iterator[str]) -> Iterator[str]:
    """A tail starts a new paragraph after the prefix."""
    first = next(chunks)
    yield "\n\n" + first
    yield from chunks


class _Pieces:
    """Generated text and the end offsets of its pieces (a cut at piece k keeps k pieces)."""

    def __init__(self, chunks: Iterator[str], min_chars: int) -> None:
        self._chunks = chunks
        self._parts: list[str] = []
        self.text = ""
        self.ends: list[int] = []
        self.extend(min_chars)

    def extend(self, more_chars: int) -> None:
        size = len(self.text)
        goal = size + max(more_chars, 1)
        while size < goal:
            part = next(self._chunks)
            self._parts.append(part)
            size += len(part)
        self.text = "".join(self._parts)
        # Pieces are contiguous (each starts with the whitespace after the last), so their
        # ends are the running sum of their lengths; only trailing whitespace is left out.
        self.ends = list(accumulate(map(len, _PIECE_RE.findall(self.text))))

    def __len__(self) -> int:
        return len(self.ends)

    def end(self, k: int) -> int:
        return self.ends[k - 1] if k else 0

    def prefix(self, k: int) -> str:
        return self.text[: self.end(k)]

    def secant(self, lo: int, lo_count: int, hi: int, hi_count: int, target: int) -> int:
        """The cut where the line through (lo, hi) in (chars, tokens) reaches `target`."""
        frac = (target - lo_count) / (hi_count - lo_count)
        pos = self.end(lo) + frac * (self.end(hi) - self.end(lo))
        return min(max(bisect_right(self.ends, pos), lo + 1), hi - 1)
