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
    REPLICA_METRICS,
    SERVER_LOG,
    MetricsSample,
    StreamRecord,
    read_jsonl,
    read_metrics_sample,
    read_records,
    read_stream_file,
)
from loadgen.run_manifest import RunManifest, read_run_manifest


class NotARunDirectory(ValueError):
    """The path is not a run directory (nor a sweep parent, where one is accepted)."""


@dataclass(frozen=True)
class RunInputs:
    """Everything analysis reads from one run directory."""

    manifest: RunManifest
    streams: list[StreamRecord]
    metrics: list[MetricsSample]
    # streams.jsonl lines that could not be read (torn by a crash, or corrupt)
    unreadable_streams: int = 0
    unreadable_metrics: int = 0
    # run.json fields dropped for their type, as "field (expected object, got str)"
    dropped_fields: tuple[str, ...] = ()
    # telemetry.jsonl lines (GPU power, energy, clocks; engine/telemetry.py), when sampled
    telemetry: tuple[dict[str, Any], ...] = ()
    # replica_metrics.jsonl: each replica's own scrapes where the run routed over several
    replica_metrics: tuple[MetricsSample, ...] = ()
    # server.log: the server's log lines written during the run (engine/server_log.py)
    server_log: str | None = None
    # streams.jsonl lines whose stream id an earlier line had (the first kept, these dropped)
    repeated_streams: int = 0


def damage_json(inputs: RunInputs) -> dict[str, Any]:
    """What of the directory could not be read: torn or repeated stream lines, torn metrics
    lines and run.json fields dropped for their type (a report says each)."""
    return {"unreadable_lines": inputs.unreadable_streams,
            "repeated_lines": inputs.repeated_streams,
            "unreadable_metrics_lines": inputs.unreadable_metrics,
            "dropped_manifest_fields": list(inputs.dropped_fields)}  # fmt: skip


def unplanned_records_json(inputs: RunInputs) -> dict[str, Any]:
    """summary.json's `records` for a directory that plans no count (a soak, a calibration
    point): its measured streams and what could not be read."""
    measured = sum(r.phase == "measure" for r in inputs.streams)
    return {"planned": None, "measured": measured, "missing": None} | damage_json(inputs)


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


def read_manifest(path: Path) -> RunManifest:
    """run.json (an empty manifest when absent); a corrupt file is a NotARunDirectory error."""
    return _manifest_and_dropped(path)[0]


def _manifest_and_dropped(path: Path) -> tuple[RunManifest, tuple[str, ...]]:
    """run.json, and the fields of it dropped for a wrong type or word (`field (why)`): a
    field hand-edited or written by a foreign tool costs a note, not the report (`scenario: 5`
    once raised AttributeError)."""
    f = path / "run.json"
    if not f.is_file():
        return RunManifest(), ()
    try:
        data = orjson.loads(f.read_bytes())
    except orjson.JSONDecodeError as e:
        raise NotARunDirectory(f"{f}: not valid JSON ({e}); restore it or delete it") from e
    if not isinstance(data, dict):
        raise NotARunDirectory(f"{f}: expected a JSON object; restore it or delete it")
    return read_run_manifest(data)


def load_run(path: Path) -> RunInputs:
    """Reads one run directory; NotARunDirectory (one line, naming the fix) if it is not one."""
    if not path.is_dir():
        raise NotARunDirectory(f"{path}: no such directory")
    if is_sweep_dir(path):
        raise NotARunDirectory(f"{path}: a sweep directory, not one run; pass arms/<arm>")
    if not is_run_dir(path):
        raise NotARunDirectory(f"{path}: not a run directory, no streams.jsonl")
    streams, unreadable, repeated = read_stream_file(path)
    metrics, bad_metrics = read_records(path / "metrics.jsonl", read_metrics_sample)
    telemetry = tuple(read_jsonl(path / "telemetry.jsonl"))
    manifest, dropped = _manifest_and_dropped(path)
    replica_metrics, _ = read_records(path / REPLICA_METRICS, read_metrics_sample)
    log = path / SERVER_LOG
    return RunInputs(
        manifest,
        streams,
        metrics,
        unreadable,
        bad_metrics,
        dropped,
        telemetry,
        tuple(replica_metrics),
        log.read_text(errors="replace") if log.is_file() else None,
        repeated,
    )
