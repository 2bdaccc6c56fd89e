"""What a prompt's size is measured with, and the error when a size cannot be met.

prompts.py (whole prompts) and blocks.py (trace blocks, which prompts.py composes) both build
on this module, so neither imports the other to reach it.
"""

from __future__ import annotations

from typing import Protocol


class TokenCounter(Protocol):
    """Counts the tokens of a prompt as the server will see it.

    `method`: "tokenize" (the server's /tokenize), "estimate" (no tokenizer: a rule of thumb)
    or "local" (a tokenizer in-process).
    """

    method: str

    async def count(self, text: str) -> int: ...


class PromptSizeError(ValueError):
    """The spec cannot be met: the salt tag (or prefix) alone is longer than the prompt."""
