"""`loadgen export RUN_DIR [--out DIR]`: a run's measured streams and a sweep's arms as CSV, for a
spreadsheet or a dataframe.

streams.csv holds one row per measured stream of every arm, its columns named after the fields
of summary.json's `streams`; a sweep adds arms.csv, one row per arm: its swept settings and
flags, its load row (analysis/load_sweep.py) and, in a load sweep, whether it is on the Pareto
frontier. Both are recomputed from the records, as every report is (summary.json on disk may be
older, or redacted); nothing draws, so matplotlib and rich stay unimported.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.analysis.inputs import is_sweep_dir
from loadgen.analysis.load_sweep import LOAD_ROW_FIELDS
from loadgen.analysis.summary import MEASURE, analyze_run
from loadgen.analysis.summary_types import RunSummary, read_run
from loadgen.analysis.sweep import analyze_sweep
from loadgen.analysis.sweep_types import SweepSummary, read_sweep
from loadgen.codec import to_json
from loadgen.report.text import lost_lines

STREAMS_CSV = "streams.csv"
ARMS_CSV = "arms.csv"
# The scalar fields of a summary stream row that streams.csv keeps, in this order.
STREAM_COLUMNS = (
    "arm",
    "id",
    "group",
    "rep",
    "status",
    "verdict",
    "prompt_tokens",
    "completion_tokens",
    "chunks",
    "token_source",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "decode_tok_s",
    "t_intended_s",
    "t_sent_s",
)
PARETO = "pareto"


def stream_rows(summaries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The measured streams of each summary, in its order, as STREAM_COLUMNS."""
    return [
        {c: s[c] for c in STREAM_COLUMNS}
        for summary in summaries
        for s in summary["streams"]
        if s["phase"] == MEASURE
    ]


def arm_columns(s: SweepSummary) -> list[str]:
    """arm, every setting or flag any arm sets (sorted), the load row's fields, pareto."""
    keys = sorted({k for arm in s.arms.values() for k in arm.swept})
    return ["arm", *keys, *LOAD_ROW_FIELDS, PARETO]


def arm_rows(s: SweepSummary) -> list[dict[str, Any]]:
    """One row per arm in the sweep's order; `pareto` is empty unless it is a load sweep."""
    return [
        {"arm": name, **arm.swept, **to_json(arm.load_row),
         PARETO: None if s.load is None else name in s.load.pareto}
        for name, arm in s.arms.items()
    ]  # fmt: skip


def write_csv(path: Path, columns: Sequence[str], rows: Iterable[dict[str, Any]]) -> None:
    """A header of `columns`, then one line per row (None as an empty cell)."""
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(columns), restval="")
        writer.writeheader()
        writer.writerows(rows)


@dataclass(frozen=True, slots=True)
class Exported:
    """The CSV files written, and what a reader of them must know: records lost from the run
    directory (each such stream is not a row) and the clock the times are on."""

    paths: tuple[Path, ...]
    notes: tuple[str, ...]


def export(run_dir: Path, out: Path) -> Exported:
    """Writes streams.csv (and, for a sweep, arms.csv) of `run_dir` into `out`."""
    tables: list[tuple[str, Sequence[str], list[dict[str, Any]]]]
    if is_sweep_dir(run_dir):
        sweep, arms = analyze_sweep(run_dir)
        s = read_sweep(sweep)
        summaries = {f"arm {name}: ": a.summary for name, a in arms.items()}
        streams = stream_rows(summaries.values())
        tables = [(STREAMS_CSV, STREAM_COLUMNS, streams),
                  (ARMS_CSV, arm_columns(s), arm_rows(s))]  # fmt: skip
    else:
        summaries = {"": analyze_run(run_dir).summary}
        tables = [(STREAMS_CSV, STREAM_COLUMNS, stream_rows(summaries.values()))]
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, columns, rows in tables:
        write_csv(out / name, columns, rows)
        written.append(out / name)
    notes = [f"{arm}{line}" for arm, summary in summaries.items()
             for line in _notes(read_run(summary))]  # fmt: skip
    return Exported(tuple(written), tuple(dict.fromkeys(notes)))


def _notes(run: RunSummary) -> list[str]:
    lost = [] if run.records is None else lost_lines(run.records)
    if run.target.kind != "sim" or run.speed in (None, 1.0):
        return lost
    return [*lost, f"note: times and rates are on the run clock; the sim ran at speed "
            f"{run.speed:g}, so its engine clock (a soak report's) reads times x {run.speed:g} "
            f"and rates / {run.speed:g}"]  # fmt: skip
