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

from loadgen.clock import ClockName
from loadgen.records import (
    REPLICA_METRICS,
    SERVER_LOG,
    MetricsSample,
    StreamRecord,
    read_jsonl,
    read_records,
)

# What each top-level run.json field must be where analysis reads it: a field of another type
# (hand-edited, or written by a foreign tool) is dropped with a note instead of crashing the
# report (`scenario: 5` raised AttributeError). Fields not listed are kept as they are.
_DICT, _LIST, _STR, _INT = (dict,), (list,), (str,), (int,)
MANIFEST_TYPES: dict[str, tuple[type, ...]] = {
    "arm": _DICT, "arms": _LIST, "boots": _LIST, "boots_note": _STR, "boots_per_arm": _INT,
    "cache_checks": _LIST, "client": _DICT, "clock": _STR, "interrupted": (bool,),
    "model": _STR, "planned_streams": _INT, "prompt_shapes": _DICT, "scenario": _DICT,
    "seed": _INT, "seed_source": _STR, "server": _DICT, "settings": _DICT, "flags": _DICT,
    "slo": (dict, type(None)), "slo_shares": _DICT, "soak_end": _DICT, "speed": (int, float),
    "target": (dict, str), "token_counter": _STR, "tool_version": _STR, "measured": _INT,
    "targets": _DICT,
    "metric_percentiles": _LIST,
}  # fmt: skip
# Fields that name one of a few things: another word is dropped like a wrong type (a clock
# loadgen does not know would otherwise reach the report as a ValueError).
MANIFEST_WORDS: dict[str, tuple[str, ...]] = {"clock": tuple(ClockName)}


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
    unreadable_metrics: int = 0
    # run.json fields dropped for their type, as "field (a str, expected dict)"
    dropped_fields: tuple[str, ...] = ()
    # telemetry.jsonl lines (GPU power, energy, clocks; engine/telemetry.py), when sampled
    telemetry: tuple[dict[str, Any], ...] = ()
    # replica_metrics.jsonl: each replica's own scrapes where the run routed over several
    replica_metrics: tuple[MetricsSample, ...] = ()
    # server.log: the server's log lines written during the run (engine/server_log.py)
    server_log: str | None = None


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
    return {k: v for k, v in data.items() if _typed(k, v)}


def _typed(key: str, value: Any) -> bool:
    want = MANIFEST_TYPES.get(key)
    typed = want is None or (isinstance(value, want) and (bool in want) == (type(value) is bool))
    return typed and (key not in MANIFEST_WORDS or value in MANIFEST_WORDS[key])


def _expected(key: str) -> str:
    words = MANIFEST_WORDS.get(key)
    return " or ".join(words or (t.__name__ for t in MANIFEST_TYPES[key]))


def dropped_fields(path: Path) -> tuple[str, ...]:
    """run.json fields read_manifest drops for their type (or word), each as `field (a T,
    expected U)`."""
    try:
        data = orjson.loads((path / "run.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return ()
    if not isinstance(data, dict):
        return ()
    return tuple(
        f"{k} (a {type(v).__name__}, expected {_expected(k)})"
        for k, v in data.items()
        if not _typed(k, v)
    )


def load_run(path: Path) -> RunInputs:
    """Reads one run directory; NotARunDirectory (one line, naming the fix) if it is not one."""
    if not path.is_dir():
        raise NotARunDirectory(f"{path}: no such directory")
    if is_sweep_dir(path):
        raise NotARunDirectory(f"{path}: a sweep directory, not one run; pass arms/<arm>")
    if not is_run_dir(path):
        raise NotARunDirectory(f"{path}: not a run directory, no streams.jsonl")
    streams, unreadable = read_records(path / "streams.jsonl", StreamRecord.from_json)
    metrics, bad_metrics = read_records(path / "metrics.jsonl", MetricsSample.from_json)
    telemetry = tuple(read_jsonl(path / "telemetry.jsonl"))
    replica_metrics, _ = read_records(path / REPLICA_METRICS, MetricsSample.from_json)
    log = path / SERVER_LOG
    return RunInputs(
        read_manifest(path),
        streams,
        metrics,
        unreadable,
        bad_metrics,
        dropped_fields(path),
        telemetry,
        tuple(replica_metrics),
        log.read_text(errors="replace") if log.is_file() else None,
    )
