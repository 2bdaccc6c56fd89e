"""The run seed: where a run's salts come from, and how a later run can replay them.

By default every run draws a fresh seed from the OS's randomness (never the clock: two runs in
one second, or on two boxes, must not share salts), so a salted prompt is cold on any server,
however long it has been up. `--seed N` uses N; `--replay RUN_DIR` uses the seed that run
recorded in its run.json. Either way the seed and its source go into run.json, and the same
seed gives the same salts and the same text.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

import click
import orjson

from loadgen.run_manifest import read_run_manifest
from loadgen.scenario.limits import SEED_MAX

SEED_BITS = 63
# Every --seed flag: run.json stores the seed as a JSON integer, which orjson writes only up
# to 64 bits (--seed 2^70 crashed the run at its manifest).
SEED_TYPE = click.IntRange(-SEED_MAX, SEED_MAX)


@dataclass(frozen=True, slots=True)
class RunSeed:
    value: int
    source: str  # "fresh" | "user" | "replay:<run dir>"


def fresh_seed() -> int:
    return secrets.randbits(SEED_BITS)


def resolve_run_seed(seed: int | None, replay: Path | None) -> RunSeed:
    """The run seed from --seed or --replay, else a fresh one. Raises ValueError (one line)
    when both are given or the replayed run.json holds no seed."""
    if seed is not None and replay is not None:
        raise ValueError("--seed and --replay both name a seed: pass one of them")
    if replay is not None:
        return RunSeed(recorded_seed(replay), f"replay:{replay}")
    if seed is not None:
        return RunSeed(seed, "user")
    return RunSeed(fresh_seed(), "fresh")


def recorded_seed(run_dir: Path) -> int:
    """The seed a run recorded in RUN_DIR/run.json."""
    path = run_dir / "run.json"
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not valid JSON"
        raise ValueError(f"--replay {run_dir}: cannot read {path}: {why}") from None
    seed = read_run_manifest(data)[0].seed if isinstance(data, dict) else None
    if seed is None or abs(seed) > SEED_MAX:
        raise ValueError(f"--replay {run_dir}: {path} records no integer 'seed' within 2^63")
    return seed
