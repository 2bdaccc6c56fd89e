"""Honest lengths: measured streams whose output fell short of what ignore_eos owed, and prompts
that drifted from the length asked.

Each stream record carries the lengths on both sides: prompt tokens asked
(`requested_prompt_tokens`), sent (`prompt_tokens_sent`, loadgen's own count of the prompt it
built) and counted by the server (`prompt_tokens`, from usage with include_usage); output tokens
requested (`max_tokens`) and delivered (`completion_tokens`).

- `short_output`: a stream sent with ignore_eos owes max_tokens in full; one that delivered
  fewer by more than SHORT_SHARE of the request or more than SHORT_TOKENS is short (a server
  that ignores ignore_eos: peers' users reported such answers). Judged only where the count is
  a token count (not `chunk_count`, where a chunk may carry several tokens) and the stream did
  not answer with a tool call (a call ends the answer by design).
- `prompt_drift`: the prompt sent, or counted by the server, differs from the length asked by
  more than DRIFT_TOKENS and more than DRIFT_SHARE of it. The absolute floor is a chat
  template's frame: Llama 3.1's header with its default date block and Qwen 2.5's default
  system prompt each add 20-30 tokens to a message, which on a 100-token prompt is a quarter
  of it but no drift a user asked for a fix of; the share catches what a template cannot
  explain (1,024 tokens asked, 1,107 counted is 83 tokens, 8%).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from loadgen.records import StreamRecord

SHORT_SHARE = 0.05
SHORT_TOKENS = 50
DRIFT_SHARE = 0.05
DRIFT_TOKENS = 32
# Counts of output that are not token counts: a short one proves nothing.
INEXACT_SOURCES = frozenset({"chunk_count"})
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ShortOutput:
    """`streams` of the `judged` measured ignore_eos streams delivered short; `groups` they
    belong to; the worst (largest shortfall): its id, tokens requested and delivered."""

    streams: int
    judged: int
    groups: tuple[str, ...]
    worst: str
    requested: int
    delivered: int


@dataclass(frozen=True, slots=True)
class PromptDrift:
    """`streams` of the `judged` measured streams with an asked length drifted; `groups`
    they belong to; the worst: its id, tokens asked, sent and counted (None: not known)."""

    streams: int
    judged: int
    groups: tuple[str, ...]
    worst: str
    asked: int
    sent: int | None
    counted: int | None


def output_shortfall(rec: StreamRecord) -> int | None:
    """Tokens `rec` owed under ignore_eos and did not deliver; None where it owed none or its
    count cannot say (module docstring)."""
    if (
        rec.phase != "measure" or rec.status != "ok" or not rec.ignore_eos
        or rec.max_tokens is None or rec.tool_calls or rec.token_source in INEXACT_SOURCES
    ):  # fmt: skip
        return None
    return max(rec.max_tokens - rec.completion_tokens, 0)


def is_short(shortfall: int, requested: int) -> bool:
    return shortfall > SHORT_SHARE * requested or shortfall > SHORT_TOKENS


def prompt_gap(rec: StreamRecord) -> int | None:
    """The larger distance of the sent and the counted prompt from the asked one; None where
    the stream asked no length or nothing measured it."""
    if rec.phase != "measure" or rec.status != "ok" or rec.requested_prompt_tokens is None:
        return None
    got = [n for n in (rec.prompt_tokens_sent, rec.prompt_tokens) if n is not None]
    return max((abs(n - rec.requested_prompt_tokens) for n in got), default=None)


def drifts(gap: int, asked: int) -> bool:
    return gap > DRIFT_TOKENS and gap > DRIFT_SHARE * asked


def short_output(records: Iterable[StreamRecord]) -> ShortOutput | None:
    """The measured streams that delivered short under ignore_eos, or None where none did."""

    def build(n: int, judged: int, groups: tuple[str, ...], worst: StreamRecord) -> ShortOutput:
        owed = worst.max_tokens or 0
        return ShortOutput(n, judged, groups, worst.id, owed, worst.completion_tokens)

    return _flagged(records, output_shortfall, lambda r, f: is_short(f, r.max_tokens or 0), build)


def prompt_drift(records: Iterable[StreamRecord]) -> PromptDrift | None:
    """The measured streams whose prompt drifted from the asked length, or None."""

    def build(n: int, judged: int, groups: tuple[str, ...], worst: StreamRecord) -> PromptDrift:
        asked = worst.requested_prompt_tokens or 0
        sent, counted = worst.prompt_tokens_sent, worst.prompt_tokens
        return PromptDrift(n, judged, groups, worst.id, asked, sent, counted)

    return _flagged(
        records, prompt_gap, lambda r, g: drifts(g, r.requested_prompt_tokens or 0), build
    )


def _flagged(
    records: Iterable[StreamRecord],
    amount: Callable[[StreamRecord], int | None],
    too_far: Callable[[StreamRecord, int], bool],
    build: Callable[[int, int, tuple[str, ...], StreamRecord], T],
) -> T | None:
    """`build` of the records whose `amount` (None: not judged) is `too_far`: their count,
    how many were judged, their groups and the one furthest off (the last id among equals);
    None where none was flagged."""
    judged = [(r, n) for r in records if (n := amount(r)) is not None]
    flagged = [(r, n) for r, n in judged if too_far(r, n)]
    if not flagged:
        return None
    worst, _ = max(flagged, key=lambda rn: (rn[1], rn[0].id))
    groups = tuple(sorted({r.group for r, _ in flagged}))
    return build(len(flagged), len(judged), groups, worst)
