"""Request traces to replay: arrival times with input and output token lengths.

Formats (the public traces' own schemas):
- `mooncake`: JSONL `{timestamp (ms, relative), input_length, output_length, hash_ids}`.
  hash_ids name 512-token prefix blocks: rows sharing leading ids share those leading blocks
  (the planner rebuilds them, see blocks.py); a row's last id may name a partial block.
- `bailian`: JSONL `{chat_id, parent_chat_id (-1 = root), timestamp (s), input_length,
  output_length, type, turn, hash_ids}` (Qwen-Bailian, "KVCache Cache in the Wild"): 16-token
  block ids, and a follow-up turn carries its whole context in input_length and hash_ids, so
  replaying the ids replays the conversation's sharing. Rows are read as sessions: a row's
  session is its root chat (followed through parent_chat_id), its turn the trace's `turn`.
- `azure`: CSV `TIMESTAMP,ContextTokens,GeneratedTokens`, TIMESTAMP an absolute wall-clock
  string with up to 9 fractional digits (Azure LLM inference trace 2023).
- `burstgpt`: CSV with `Timestamp` (s), `Request tokens`, `Response tokens`; rows with 0
  response tokens are failed requests in that trace and are skipped.
Rows with no output tokens are skipped everywhere, and counted (the report says how many).
Offsets are relative to the earliest row, skipped or not, and multiplied by `time_scale` (0.5
replays twice as fast).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from loadgen.scenario.model import TraceReuse, TraceRow


class TraceError(ValueError):
    """A trace file that cannot be read; the message names the file and row."""


def infer_format(path: Path) -> str | None:
    """The trace format from the file's suffix and header, or None when it cannot tell."""
    if path.suffix in (".jsonl", ".json"):
        with path.open(encoding="utf-8") as f:
            first = f.readline()
        return "bailian" if '"chat_id"' in first else "mooncake"
    if path.suffix != ".csv":
        return None
    with path.open(encoding="utf-8", newline="") as f:
        header = next(csv.reader(f), [])
    if "ContextTokens" in header:
        return "azure"
    if "Request tokens" in header:
        return "burstgpt"
    return None


def read_trace(
    path: Path, fmt: str, limit: int | None, time_scale: float
) -> tuple[tuple[TraceRow, ...], int]:
    """The first `limit` usable rows of the trace, as time-scaled offsets from the trace's
    earliest row (a skipped row still marks when the trace began), and how many rows were
    skipped for asking no output tokens."""
    raw: list[TraceRow] = []
    skipped = 0
    t0: int | None = None
    for t_ns, n_in, n_out, *more in _ROWS[fmt](path):
        t0 = t_ns if t0 is None else min(t0, t_ns)
        if n_out == 0:
            skipped += 1
            continue
        raw.append(TraceRow(t_ns, n_in, n_out, *more))
        if limit is not None and len(raw) >= limit:
            break
    if not raw or t0 is None:
        raise TraceError(f"{path}: no usable rows")
    rows = [replace(r, offset_ns=round((r.offset_ns - t0) * time_scale)) for r in raw]
    return tuple(sorted(rows, key=lambda r: r.offset_ns)), skipped


def full_blocks(row: TraceRow, block_tokens: int) -> tuple[int, ...]:
    """The row's hash_ids that name whole blocks inside its prompt (a last partial block, or
    ids beyond input_length, are not a shareable prefix: those tokens are the row's own)."""
    return row.hash_ids[: row.input_tokens // block_tokens]


def implied_reuse(rows: tuple[TraceRow, ...], block_tokens: int) -> TraceReuse:
    """Reuse with an unbounded prefix cache, rows in trace order: a row hits its leading full
    blocks whose ids an earlier row carried (a prefix cache stops at the first miss)."""
    seen: set[int] = set()
    hit_tokens = prompt_tokens = blocks_seen = blocks = 0
    for row in rows:
        lead = 0
        for h in full_blocks(row, block_tokens):
            if h not in seen:
                break
            lead += 1
        hit_tokens += lead * block_tokens
        prompt_tokens += row.input_tokens
        blocks_seen += sum(h in seen for h in row.hash_ids)
        blocks += len(row.hash_ids)
        seen.update(row.hash_ids)
    return TraceReuse(
        token_rate=hit_tokens / prompt_tokens if prompt_tokens else 0.0,
        block_rate=blocks_seen / blocks if blocks else 0.0,
        hit_tokens=hit_tokens,
        prompt_tokens=prompt_tokens,
        blocks_seen=blocks_seen,
        blocks=blocks,
    )


def _hash_ids(value: object) -> tuple[int, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(type(h) is int for h in value):
        raise ValueError(f"hash_ids must be a list of integers, got {str(value)[:40]}")
    return tuple(value)


class _Forward:
    """A replay needs times that never run backwards: a negative or out-of-order timestamp is
    a broken trace, refused at its line, not something to re-sort silently."""

    def __init__(self) -> None:
        self.last_ns: int | None = None

    def check(self, where: str, t_ns: int, n_in: int, n_out: int) -> None:
        if t_ns < 0:
            raise TraceError(f"{where}: negative timestamp (expected times >= 0)")
        if self.last_ns is not None and t_ns < self.last_ns:
            raise TraceError(
                f"{where}: timestamp earlier than the row before (expected sorted rows)"
            )
        if n_in < 0:
            raise TraceError(f"{where}: negative input length (expected a token count >= 0)")
        if n_out < 0:
            raise TraceError(f"{where}: negative output length (expected a token count >= 0)")
        self.last_ns = t_ns


def _json_rows(path: Path, fmt: str, expected: str, parse: Callable[[Any], tuple]) -> Iterator:
    """`parse` of each JSONL row; a row it cannot read names the file, line and fields."""
    forward = _Forward()
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out = parse(json.loads(line))
            except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as exc:
                raise TraceError(
                    f"{path}:{lineno}: bad {fmt} row ({exc.__class__.__name__}: {exc}; expected "
                    f"{expected})"
                ) from None
            forward.check(f"{path}:{lineno}", out[0], out[1], out[2])
            yield out


def _count(row: Any, key: str) -> int:
    """A JSON token count: an integer, not a string, a float or a boolean int() would take."""
    value = row[key]
    if type(value) is not int:
        raise ValueError(f"{key} must be an integer, got {str(value)[:40]}")
    return value


def _seconds_ns(row: Any, key: str, unit_ns: int) -> int:
    """A JSON timestamp in `unit_ns` units as ns: a finite number (ints exact)."""
    value = row[key]
    if type(value) is int:
        return value * unit_ns
    if type(value) is not float or not math.isfinite(value):
        raise ValueError(f"{key} must be a finite number, got {str(value)[:40]}")
    return round(value * unit_ns)


def _mooncake(path: Path) -> Iterator[tuple[int, int, int, tuple[int, ...]]]:
    def parse(row: Any) -> tuple[int, int, int, tuple[int, ...]]:
        return (
            _seconds_ns(row, "timestamp", 1_000_000),
            _count(row, "input_length"),
            _count(row, "output_length"),
            _hash_ids(row.get("hash_ids")),
        )

    return _json_rows(path, "mooncake", "timestamp, input_length, output_length, hash_ids", parse)


def _bailian(path: Path) -> Iterator[tuple[int, int, int, tuple[int, ...], str, int]]:
    root: dict[int, int] = {}

    def parse(row: Any) -> tuple[int, int, int, tuple[int, ...], str, int]:
        chat, parent = _count(row, "chat_id"), _count(row, "parent_chat_id")
        # A parent outside the file (a sampled trace) roots its own session.
        root[chat] = chat if parent == -1 else root.get(parent, parent)
        return (
            _seconds_ns(row, "timestamp", 1_000_000_000),
            _count(row, "input_length"),
            _count(row, "output_length"),
            _hash_ids(row.get("hash_ids")),
            str(root[chat]),
            _count(row, "turn"),
        )

    expected = "chat_id, parent_chat_id, timestamp, input_length, output_length, turn, hash_ids"
    return _json_rows(path, "bailian", expected, parse)


def _csv_rows(path: Path, columns: tuple[str, str, str]) -> Iterator[tuple[int, list[str]]]:
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceError(f"{path}:1: missing column(s) {', '.join(missing)}")
        for row in reader:
            values = [row[c] for c in columns]
            if None in values:
                # DictReader pads a short row with None, which int() would take as a TypeError.
                raise TraceError(
                    f"{path}:{reader.line_num}: row has fewer fields than the header "
                    f"(expected {', '.join(columns)})"
                )
            yield reader.line_num, values


def _azure(path: Path) -> Iterator[tuple[int, int, int]]:
    forward = _Forward()
    for lineno, (stamp, n_in, n_out) in _csv_rows(
        path, ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
    ):
        try:
            row = _azure_ns(stamp), int(n_in), int(n_out)
        except (ValueError, OverflowError) as exc:
            raise TraceError(f"{path}:{lineno}: bad azure row ({exc})") from None
        forward.check(f"{path}:{lineno}", *row)
        yield row


def _azure_ns(stamp: str) -> int:
    """'2023-11-16 18:17:03.9799600' as ns since the epoch (more digits than datetime keeps)."""
    whole, _, frac = stamp.strip().partition(".")
    seconds = int(datetime.strptime(whole, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp())
    if frac and not frac.isdigit():
        raise ValueError(f"bad fraction in {stamp!r}")
    return seconds * 1_000_000_000 + int((frac or "0").ljust(9, "0")[:9])


def _burstgpt(path: Path) -> Iterator[tuple[int, int, int]]:
    forward = _Forward()
    for lineno, (stamp, n_in, n_out) in _csv_rows(
        path, ("Timestamp", "Request tokens", "Response tokens")
    ):
        try:
            row = round(float(stamp) * 1e9), int(n_in), int(n_out)
        except (ValueError, OverflowError) as exc:
            raise TraceError(f"{path}:{lineno}: bad burstgpt row ({exc})") from None
        forward.check(f"{path}:{lineno}", *row)
        yield row


# Each reader yields TraceRow's leading fields: offset, input and output tokens, then what its
# format adds (hash_ids; session and turn).
_ROWS: dict[str, Callable[[Path], Iterator[tuple[Any, ...]]]] = {
    "mooncake": _mooncake,
    "bailian": _bailian,
    "azure": _azure,
    "burstgpt": _burstgpt,
}
