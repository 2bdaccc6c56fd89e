"""Request traces to replay: arrival times with input and output token lengths.

Formats (the public traces' own schemas):
- `mooncake`: JSONL `{timestamp (ms, relative), input_length, output_length, hash_ids}`.
  hash_ids (512-token prefix blocks) are not replayed: every row is sent salted.
- `azure`: CSV `TIMESTAMP,ContextTokens,GeneratedTokens`, TIMESTAMP an absolute wall-clock
  string with up to 9 fractional digits (Azure LLM inference trace 2023).
- `burstgpt`: CSV with `Timestamp` (s), `Request tokens`, `Response tokens`; rows with 0
  response tokens are failed requests in that trace and are skipped.
Rows with no output tokens are skipped everywhere. Offsets are relative to the earliest row and
multiplied by `time_scale` (0.5 replays twice as fast).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from loadgen.scenario.model import TraceRow


class TraceError(ValueError):
    """A trace file that cannot be read; the message names the file and row."""


def infer_format(path: Path) -> str | None:
    """The trace format from the file's suffix and header, or None when it cannot tell."""
    if path.suffix in (".jsonl", ".json"):
        return "mooncake"
    if path.suffix != ".csv":
        return None
    with path.open(encoding="utf-8", newline="") as f:
        header = next(csv.reader(f), [])
    if "ContextTokens" in header:
        return "azure"
    if "Request tokens" in header:
        return "burstgpt"
    return None


def read_trace(path: Path, fmt: str, limit: int | None, time_scale: float) -> tuple[TraceRow, ...]:
    """The first `limit` usable rows of the trace, as time-scaled offsets from the earliest."""
    raw: list[tuple[int, int, int]] = []
    for t_ns, n_in, n_out in _ROWS[fmt](path):
        if n_out <= 0:
            continue
        raw.append((t_ns, n_in, n_out))
        if limit is not None and len(raw) >= limit:
            break
    if not raw:
        raise TraceError(f"{path}: no usable rows")
    t0 = min(t for t, _, _ in raw)
    rows = [TraceRow(round((t - t0) * time_scale), n_in, n_out) for t, n_in, n_out in raw]
    return tuple(sorted(rows, key=lambda r: r.offset_ns))


def _mooncake(path: Path) -> Iterator[tuple[int, int, int]]:
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                yield (
                    int(row["timestamp"]) * 1_000_000,
                    int(row["input_length"]),
                    int(row["output_length"]),
                )
            except (ValueError, KeyError, TypeError) as exc:
                raise TraceError(
                    f"{path}:{lineno}: bad mooncake row ({exc.__class__.__name__}: {exc}; expected "
                    "timestamp, input_length, output_length)"
                ) from None


def _csv_rows(path: Path, columns: tuple[str, str, str]) -> Iterator[tuple[int, list[str]]]:
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceError(f"{path}:1: missing column(s) {', '.join(missing)}")
        for row in reader:
            yield reader.line_num, [row[c] for c in columns]


def _azure(path: Path) -> Iterator[tuple[int, int, int]]:
    for lineno, (stamp, n_in, n_out) in _csv_rows(
        path, ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
    ):
        try:
            yield _azure_ns(stamp), int(n_in), int(n_out)
        except ValueError as exc:
            raise TraceError(f"{path}:{lineno}: bad azure row ({exc})") from None


def _azure_ns(stamp: str) -> int:
    """'2023-11-16 18:17:03.9799600' as ns since the epoch (more digits than datetime keeps)."""
    whole, _, frac = stamp.strip().partition(".")
    seconds = int(datetime.strptime(whole, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp())
    if frac and not frac.isdigit():
        raise ValueError(f"bad fraction in {stamp!r}")
    return seconds * 1_000_000_000 + int((frac or "0").ljust(9, "0")[:9])


def _burstgpt(path: Path) -> Iterator[tuple[int, int, int]]:
    for lineno, (stamp, n_in, n_out) in _csv_rows(
        path, ("Timestamp", "Request tokens", "Response tokens")
    ):
        try:
            yield round(float(stamp) * 1e9), int(n_in), int(n_out)
        except ValueError as exc:
            raise TraceError(f"{path}:{lineno}: bad burstgpt row ({exc})") from None


_ROWS = {"mooncake": _mooncake, "azure": _azure, "burstgpt": _burstgpt}
