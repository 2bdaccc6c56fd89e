"""Prompt text assembled from blocks of an exact token length, for traces that name their
shared prefix blocks (Mooncake's hash_ids).

A block is a run of words, each with its leading space (" harbor"), drawn by a seeded RNG. A
word with a leading space is one pre-token in byte-level BPE splits (GPT-2, Llama 3, Qwen) and
in the sim's tokenizer, so no token spans two words: a block counts the sum of its words'
counts wherever it stands (prompt start, after another block, before a tail), and two prompts
that open with the same blocks open with the same token ids. Each word's count is learned once
per builder from the counter (one call per word, plus two for the special tokens the server
adds around any prompt); the first prompts are counted whole to confirm the sum, and a
tokenizer that does not add up is refused with a one-line error rather than sent wrong sizes.

Alignment: a trace block of B tokens starts at token k*B of the prompt (plus the server's BOS,
if any). A server whose cache block size divides B (16 on the sim, 32 for vLLM on CPU, 512 for
Mooncake's B) caches every shared trace block whole; a size that does not divide B loses up to
one server block per shared prefix. The chat API shifts every block by the template's head.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_right

import numpy as np

from loadgen.scenario.token_counter import PromptSizeError, TokenCounter
from loadgen.scenario.vocab import NOUNS

# Words whose counts are learned: enough variety, one counter call each.
WORDS = NOUNS[:256]
# Whole prompts counted to confirm that block counts add up on this tokenizer.
VERIFY_PROMPTS = 4


class BlockComposer:
    """Builds word runs of an exact token count on one counter's tokenizer."""

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self.overhead = 0
        self._texts: list[str] = []
        self._costs = np.zeros(0, dtype=np.int64)
        self._by_cost: list[int] = []
        self._sorted_costs: list[int] = []
        self._verified = 0
        # Prompts sized concurrently all need the words: one learns, the others wait for it.
        self._learning = asyncio.Lock()

    async def learn(self) -> None:
        """Counts every word once; `overhead` is what the server adds to any prompt (BOS)."""
        async with self._learning:
            if not self._texts:
                await self._learn_words()

    async def _learn_words(self) -> None:
        one, two = await self.counter.count(" the"), await self.counter.count(" the the")
        self.overhead = 2 * one - two
        costs = {}
        for w in WORDS:
            cost = await self.counter.count(" " + w) - self.overhead
            if cost >= 1:
                costs[" " + w] = cost
        if 1 not in costs.values():
            raise PromptSizeError("no one-token word on this tokenizer: blocks cannot be exact")
        self._texts = list(costs)
        self._costs = np.array([costs[t] for t in self._texts], dtype=np.int64)
        self._by_cost = sorted(range(len(self._texts)), key=lambda i: costs[self._texts[i]])
        self._sorted_costs = [int(self._costs[i]) for i in self._by_cost]

    def compose(self, tokens: int, seed: int) -> str:
        """A word run of exactly `tokens` tokens, the same for the same seed."""
        if tokens <= 0:
            return ""
        rng = np.random.default_rng(seed)
        picks = rng.integers(0, len(self._texts), size=tokens)
        cum = np.cumsum(self._costs[picks])
        # Bulk draws stop while every word still fits; the end is drawn from words that do.
        k = int(np.searchsorted(cum, tokens - self._sorted_costs[-1], side="right"))
        left = tokens - (int(cum[k - 1]) if k else 0)
        parts = [self._texts[i] for i in picks[:k]]
        while left > 0:
            fits = bisect_right(self._sorted_costs, left)
            i = self._by_cost[int(rng.integers(0, fits))]
            parts.append(self._texts[i])
            left -= int(self._costs[i])
        return "".join(parts)

    async def verify(self, text: str, expected: int) -> None:
        """Counts the first few whole prompts: block sums must equal the tokenizer's count."""
        if self._verified >= VERIFY_PROMPTS:
            return
        self._verified += 1
        got = await self.counter.count(text)
        if got != expected:
            raise PromptSizeError(
                f"block prompt of {expected} tokens counts {got} on the server's tokenizer: its "
                "words do not add up (use sharing: salted for this server)"
            )
