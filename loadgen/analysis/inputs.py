"""Reading a run directory (DESIGN.md's contract) for analysis: nothing here touches a network.

A run directory holds streams.jsonl (and usually metrics.jsonl and run.json). A sweep parent
holds a run.json and arms/<arm>/ run directories. Missing or partial files (interrupted runs,
servers without /metrics, older manifests) read as empty, never as errors.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from loadgen.records import (
    MetricsSample,
    StreamRecord,
    count_unreadable,
    read_jsonl,
    read_metrics,
    read_streams,
)


class NotARunDirectory(ValueError):
    """The path is not a run directory (nor a sweep parent, where one is accepted)."""


@dataclass(frozen=True)
class RunInputs:
    """Everything analysis reads from one run directory."""

    manifest: dict[str, Any]
    streams: list[StreamRecord]
    metrics: list[MetricsSample]
    # streams.jsonl lines that could not be read (torn by a crash, or corrupt)
    unreadable_streams: int = 0
    # telemetry.jsonl lines (GPU power, energy, clocks; engine/telemetry.py), when sampled
    telemetry: tuple[dict[str, Any], ...] = ()


def is_run_dir(path: Path) -> bool:
    return path.is_dir() and (path / "streams.jsonl").is_file()


def arm_dirs(path: Path) -> list[Path]:
    """The arms/<arm>/ run directories of a sweep parent, by name; empty for anything else."""
    arms = path / "arms"
    if not arms.is_dir():
        return []
    return sorted(p for p in arms.iterdir() if is_run_dir(p))


def is_sweep_dir(path: Path) -> bool:
    """A sweep parent: it holds arms/<arm>/ run directories (its own streams.jsonl, if any, is
    the engine's empty placeholder)."""
    return bool(arm_dirs(path))


def read_manifest(path: Path) -> dict[str, Any]:
    """run.json as a dict ({} when absent); a corrupt file is a NotARunDirectory error."""
    f = path / "run.json"
    if not f.is_file():
        return {}
    try:
        data = orjson.loads(f.read_bytes())
    except orjson.JSONDecodeError as e:
        raise NotARunDirectory(f"{f}: not valid JSON ({e}); restore it or delete it") from e
    if not isinstance(data, dict):
        raise NotARunDirectory(f"{f}: expected a JSON object; restore it or delete it")
    return data


def load_run(path: Path) -> RunInputs:
    """Reads one run directory; NotARunDirectory (one line, naming the fix) if it is not one."""
    if not path.is_dir():
        raise NotARunDirectory(f"{path}: no such directory")
    if is_sweep_dir(path):
        raise NotARunDirectory(f"{path}: a sweep directory, not one run; pass arms/<arm>")
    if not is_run_dir(path):
        raise NotARunDirectory(f"{path}: not a run directory, no streams.jsonl")
    try:
        streams = read_streams(path)
    except (KeyError, TypeError) as e:
        raise NotARunDirectory(f"{path / 'streams.jsonl'}: a record lacks a field ({e})") from e
    unreadable = count_unreadable(path / "streams.jsonl")
    telemetry = tuple(read_jsonl(path / "telemetry.jsonl"))
    return RunInputs(read_manifest(path), streams, read_metrics(path), unreadable, telemetry)
