"""Needle prompts: a distinctive fact planted at a chosen depth of a prompt and asked back at
its end, scored exact-match per stream (the expected code appears in the answer text).

One module for the three sides that must agree on the wording: the prompt builder plants it,
the client scores the answer, the sim finds the code to answer with. Recall is not quality: a
model can retrieve one planted line and still answer real questions badly (the field notes ran
needles at 29k-218k tokens only to see a quantized cache does not lose the plot).
"""

from __future__ import annotations

import random
import re
import string

CODE_CHARS = 8
_ALPHABET = string.ascii_uppercase + string.digits
_FACT_RE = re.compile(r"The secret code for (\S+) is ([A-Z0-9]+)\.")
_QUESTION_RE = re.compile(r"What is the secret code for (\S+)\? Answer with the code only\.\s*$")
RECALL_CAVEAT = (
    "recall is not quality: retrieving one planted line says the context is kept, "
    "not that answers are good"
)


def needle_code(seed: int) -> str:
    """The code for one stream, drawn from its text seed (so from the run seed)."""
    rng = random.Random(seed)
    return "".join(rng.choice(_ALPHABET) for _ in range(CODE_CHARS))


def fact(key: str, code: str) -> str:
    return f"The secret code for {key} is {code}."


def question(key: str) -> str:
    return f"\n\nWhat is the secret code for {key}? Answer with the code only."


def needle_hit(expected: str, answer: str | None) -> bool:
    """Exact match: the expected code appears in the answer text."""
    return answer is not None and expected in answer


def find_answer(prompt: str) -> str | None:
    """The code a prompt asks back (its last line names the key), or None for any other prompt.
    Only a prompt ending in the question is searched, so other prompts cost one regex at the
    end of the text."""
    asked = _QUESTION_RE.search(prompt[-200:])
    if asked is None:
        return None
    for m in _FACT_RE.finditer(prompt):
        if m.group(1) == asked.group(1):
            return m.group(2)
    return None
