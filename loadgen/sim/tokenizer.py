"""The sim's tokenizer: deterministic, lossless on any text, fast, and with a ChatML template.

Vocabulary (ids in this order, built once from fixed alphabets, never from a file):
- 5 special tokens: `<|endoftext|>` (EOS), `<|im_start|>`, `<|im_end|>`, `<think>`, `</think>`;
- 256 byte tokens `<0xNN>`: the fallback for anything outside the ASCII tables (UTF-8 bytes);
- whitespace runs: 1-16 repeats of one of space, newline, tab, carriage return;
- ASCII punctuation, bare or with one leading space;
- digit groups of 1-3 digits, bare or with a leading space;
- letter chunks: 1-3 letters all lower or all upper case, bare or with a leading space;
- 4,900 pseudo-words: two consonant-vowel syllables with a leading space (" bako"), the
  tokens the engine generates.

Encoding: text is pre-split with a GPT-2-style regex into special tokens, " word", " digits",
" punctuation mark" and whitespace runs; a piece that is a vocabulary entry is one token,
otherwise it is cut into the chunks above (letters by case runs of <= 3, digits by 3) and
anything non-ASCII falls back to its UTF-8 bytes. So decode(encode(text)) == text for every
string, encode(decode(ids)) == ids for every sequence the generator below produces, and the
same text always gives the same ids in every process (no salted hash() anywhere).

Counts run higher than a real BPE on English (about 1.7 tokens per word against ~1.3): words
outside the pseudo-word list are spelled in chunks of three letters. The sim only needs counts
that are stable and honest about what the engine computed, not a real model's.
"""

from __future__ import annotations

import functools
import itertools
import random
import re
import string
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>")
EOS_TOKEN_ID = 0
_WHITESPACE = " \n\t\r"
_MAX_WS_RUN = 16
_MAX_LETTERS = 3
_MAX_DIGITS = 3
_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"

_SPLIT = re.compile(
    "|".join(re.escape(s) for s in SPECIAL_TOKENS)
    + r"| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]|\s+(?!\S)|\s+"
)
# Where encode_slices may cut: just after a non-space that a space follows.
_CUT = re.compile(r"\S(?=\s)")
_CASE_RUNS = re.compile(r"[a-z]+|[A-Z]+")


def _byte_token(b: int) -> str:
    return f"<0x{b:02X}>"


@functools.cache
def _vocabulary() -> tuple[tuple[str, ...], dict[str, int], int, tuple[int, ...]]:
    """(id -> string, string -> id, first byte-token id, pseudo-word ids)."""
    entries: list[str] = list(SPECIAL_TOKENS)
    byte_base = len(entries)
    entries += [_byte_token(b) for b in range(256)]
    entries += [ch * n for ch in _WHITESPACE for n in range(1, _MAX_WS_RUN + 1)]
    entries += [p + c for c in string.punctuation for p in ("", " ")]
    digit_groups = (
        "".join(d)
        for n in range(1, _MAX_DIGITS + 1)
        for d in itertools.product(string.digits, repeat=n)
    )
    entries += [p + g for g in digit_groups for p in ("", " ")]
    for letters in (string.ascii_lowercase, string.ascii_uppercase):
        for n in range(1, _MAX_LETTERS + 1):
            entries += [
                p + "".join(c) for c in itertools.product(letters, repeat=n) for p in ("", " ")
            ]
    syllables = [c + v for c in _CONSONANTS for v in _VOWELS]
    word_base = len(entries)
    entries += [" " + a + b for a in syllables for b in syllables]
    word_ids = tuple(range(word_base, len(entries)))
    return tuple(entries), {s: i for i, s in enumerate(entries)}, byte_base, word_ids


@functools.lru_cache(maxsize=1 << 16)
def _encode_piece(piece: str) -> tuple[int, ...]:
    """The ids of one pre-split piece (cached: real text repeats its pieces heavily)."""
    _, ids, byte_base, _ = _vocabulary()
    known = ids.get(piece)
    if known is not None:
        return (known,)
    space = piece[0] == " " and len(piece) > 1
    body = piece[1:] if space else piece
    if body.isascii() and body.isalpha():
        chunks = [
            run[i : i + _MAX_LETTERS]
            for run in _CASE_RUNS.findall(body)
            for i in range(0, len(run), _MAX_LETTERS)
        ]
    elif body.isascii() and body.isdigit():
        chunks = [body[i : i + _MAX_DIGITS] for i in range(0, len(body), _MAX_DIGITS)]
    elif body.isspace():
        chunks = []
        for _, same in itertools.groupby(body):
            run = "".join(same)
            chunks += [run[i : i + _MAX_WS_RUN] for i in range(0, len(run), _MAX_WS_RUN)]
    else:
        chunks = [body]
    if space:
        if chunks[0].isspace() or " " + chunks[0] not in ids:
            chunks.insert(0, " ")
        else:
            chunks[0] = " " + chunks[0]
    out: list[int] = []
    for chunk in chunks:
        cid = ids.get(chunk)
        if cid is not None:
            out.append(cid)
        else:
            out.extend(byte_base + b for b in chunk.encode("utf-8"))
    return tuple(out)


def _ids(pieces: list[str]) -> list[int]:
    out: list[int] = []
    for piece in pieces:
        out.extend(_encode_piece(piece))
    return out


class _PieceLengths(dict):
    """Tokens per piece, filled on first sight: counting a long prompt is one dict lookup per
    piece (a bounded memo, like _encode_piece's)."""

    def __missing__(self, piece: str) -> int:
        if len(self) >= 1 << 16:
            self.clear()
        n = self[piece] = len(_encode_piece(piece))
        return n


_PIECE_LENGTHS = _PieceLengths()


class SimTokenizer:
    """Encode, decode, count and render chat prompts for the simulated engine."""

    eos_token_id = EOS_TOKEN_ID

    def __init__(self) -> None:
        self._strings, self._ids, self._byte_base, self._word_ids = _vocabulary()

    @property
    def vocab_size(self) -> int:
        return len(self._strings)

    def encode(self, text: str) -> list[int]:
        return _ids(_SPLIT.findall(text))

    def encode_slices(self, text: str, slice_chars: int) -> Iterator[list[int]]:
        """encode(text) in parts, each computed when asked for, so a caller can yield between
        them; every part but the last spans at least `slice_chars` characters.

        The text is cut only where a non-space is followed by a space. No pre-split piece
        spans such a cut (special tokens, letter, digit and punctuation pieces hold no space
        except a LEADING one, and a whitespace piece cannot hold the non-space), and no pattern
        looks behind or past it (the one lookahead, after a whitespace run, stops at the
        non-space), so the parts joined are exactly encode(text)."""
        start, n = 0, len(text)
        while start < n:
            cut = _CUT.search(text, start + slice_chars) if start + slice_chars < n else None
            end = cut.end() if cut else n
            yield _ids(_SPLIT.findall(text, start, end))
            start = end

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def piece_counts(self, text: str) -> tuple[list[int], list[int]]:
        """Where each pre-split piece of `text` ends, and the tokens up to that end. Pieces are
        encoded alone, so a prefix of `text` cut at one of these ends (and ending in a word or
        punctuation mark: no whitespace lookahead reaches past it) counts exactly as given."""
        # The split tiles the text (every character belongs to some alternative), so the ends
        # are the running sum of the pieces' lengths.
        pieces = _SPLIT.findall(text)
        ends = list(itertools.accumulate(map(len, pieces)))
        return ends, list(itertools.accumulate(map(_PIECE_LENGTHS.__getitem__, pieces)))

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
        parts: list[str] = []
        pending = bytearray()
        byte_base, strings = self._byte_base, self._strings
        for i in ids:
            if byte_base <= i < byte_base + 256:
                pending.append(i - byte_base)
                continue
            if pending:
                parts.append(pending.decode("utf-8", errors="replace"))
                pending.clear()
            if not 0 <= i < len(strings):
                raise ValueError(f"token id {i} is outside the vocabulary (0..{len(strings) - 1})")
            if skip_special_tokens and i < len(SPECIAL_TOKENS):
                continue
            parts.append(strings[i])
        if pending:
            parts.append(pending.decode("utf-8", errors="replace"))
        return "".join(parts)

    def apply_chat_template(
        self,
        messages: Sequence[Mapping[str, str]],
        chat_template_kwargs: Mapping[str, Any] | None = None,
        *,
        add_generation_prompt: bool = True,
    ) -> str:
        return render_chat(
            messages, chat_template_kwargs, add_generation_prompt=add_generation_prompt
        )

    def generator(self, seed: int) -> TextGenerator:
        return TextGenerator(seed, self)


def render_chat(
    messages: Sequence[Mapping[str, str]],
    chat_template_kwargs: Mapping[str, Any] | None = None,
    *,
    add_generation_prompt: bool = True,
) -> str:
    """ChatML: `<|im_start|>{role}\\n{content}<|im_end|>\\n` per message, then the assistant
    header. Template kwargs render as directives at the very start of the system block
    (enable_thinking -> /think or /no_think, any other key as key=value, sorted), so toggling
    one changes the first block and no cached prefix matches: the seed's "the chat template is
    part of the prefix" (a toggled enable_thinking missed the cache entirely)."""
    directives = [_directive(k, v) for k, v in sorted((chat_template_kwargs or {}).items())]
    rest = list(messages)
    system_parts = list(directives)
    if rest and rest[0].get("role") == "system":
        system_parts.append(rest.pop(0).get("content", ""))
    out = []
    if system_parts:
        out.append("<|im_start|>system\n" + "\n".join(system_parts) + "<|im_end|>\n")
    out += [f"<|im_start|>{m['role']}\n{m.get('content', '')}<|im_end|>\n" for m in rest]
    if add_generation_prompt:
        out.append("<|im_start|>assistant\n")
    return "".join(out)


def _directive(key: str, value: Any) -> str:
    if key == "enable_thinking":
        return "/think" if value else "/no_think"
    return f"{key}={value}"


class TextGenerator:
    """Deterministic output tokens: pseudo-words with an occasional '.', ',' or newline.

    Only canonical sequences come out (a newline or punctuation mark is always followed by a
    word), so the decoded text encodes back to exactly these ids.
    """

    def __init__(self, seed: int, tokenizer: SimTokenizer) -> None:
        self._rng = random.Random(seed)
        self._words = tokenizer._word_ids
        ids = tokenizer._ids
        self._period, self._comma, self._newline = ids["."], ids[","], ids["\n"]
        self._last = self._words[0]

    def take(self, n: int) -> list[int]:
        out: list[int] = []
        rng, words, period = self._rng, self._words, self._period
        n_words = len(words)
        last = self._last
        for _ in range(n):
            r = rng.random()
            if last == period and r < 0.15:
                last = self._newline
            elif r < 0.08 and last != self._newline and last != self._comma and last != period:
                last = period if r < 0.05 else self._comma
            else:
                last = words[int(rng.random() * n_words)]
            out.append(last)
        self._last = last
        return out
