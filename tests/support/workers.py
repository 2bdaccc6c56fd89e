"""`loadgen run --workers N` of the spread scenario, and what its run directory holds, for the
process and the Ray workers alike."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import orjson

from loadgen.analysis.hist import merge_hlogs

from support.cli import loadgen
from support.paths import DATA
from support.verdict_cases import server_verdict

SPREAD = DATA / "scenarios" / "spread.yaml"


# Sent at once: four streams get the four seats, four wait on the cap for a whole decode.
OPEN_LOOP_VERDICTS = {"admitted": 4, "admission_cap": 4}


def run_spread(tmp: Path, *extra: str) -> Path:
    res = loadgen("run", SPREAD, "--out", tmp, "--no-progress", "--seed", "5", *extra)
    assert res.returncode == 0, res.stderr
    (run_dir,) = tmp.iterdir()
    return run_dir


def stream_rows(run_dir: Path) -> list[dict]:
    return [orjson.loads(line) for line in (run_dir / "streams.jsonl").read_bytes().splitlines()]


def server_verdicts(summary: dict) -> Counter[str]:
    """Verdict counts, a client_limited stream counted by the server verdict under it: how busy
    the test machine is decides whether the client's error crossed its tolerance, not which
    process sent the stream."""
    return Counter(server_verdict(s) for s in summary["streams"])


def hist_counts(run_dir: Path) -> dict[str, int]:
    return {p.name: merge_hlogs([p]).get_total_count() for p in (run_dir / "hist").glob("*.hlog")}
