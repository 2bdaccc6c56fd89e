"""`loadgen report RUN_DIR` and `loadgen compare RUN_A RUN_B`: a run's report, and two runs'
difference against their noise."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from loadgen.analysis.compare import compare_summaries
from loadgen.analysis.inputs import read_manifest
from loadgen.analysis.soak import is_soak
from loadgen.analysis.summary import analyze_run
from loadgen.report.cmd import compare_table, soak_pair, write_report
from loadgen.report.readable import ARM_TABLES_OPTION, readable
from loadgen.report.tables import Table
from loadgen.report.text import render_rich


@click.command("report")
@click.argument("run_dir", type=click.Path(path_type=Path))
@ARM_TABLES_OPTION
def report_cmd(run_dir: Path, arm_tables: bool) -> None:
    """Recompute summary.json, report.txt, report.html and hist/ of RUN_DIR and print the tables.

    RUN_DIR is a run directory (streams.jsonl, metrics.jsonl, run.json) or a sweep directory
    (arms/<arm>/ run directories): a sweep reports every arm and the across-arm tables, and
    prints the across-arm tables (every arm's too with --arm-tables). A soak, capacity,
    fidelity or calibration directory gets its own report.txt and report.html again.
    """
    with readable(run_dir):
        click.echo(write_report(run_dir, arm_tables), nl=False)


@click.command("compare")
@click.argument("run_a", type=click.Path(path_type=Path))
@click.argument("run_b", type=click.Path(path_type=Path))
def compare_cmd(run_a: Path, run_b: Path) -> None:
    """Compare two run directories per group (median TTFT, decode tok/s, chunks/s, e2e): the
    difference against each run's own rep-to-rep spread, "within noise" when it does not exceed
    it."""
    with readable(run_a, run_b):
        soaks = [is_soak(read_manifest(p)) for p in (run_a, run_b)]
        if any(soaks):
            unlike, table = soak_pair(run_a, run_b, soaks)
            _echo_compare(unlike, table)
            return
        plans = (read_manifest(run_a).scenario, read_manifest(run_b).scenario)
        result = compare_summaries(analyze_run(run_a).summary, analyze_run(run_b).summary, plans)
    if not result.rows:
        only_a, only_b = ", ".join(result.only_a) or "none", ", ".join(result.only_b) or "none"
        raise click.ClickException(
            f"no group in common: {run_a} has {only_a}; {run_b} has {only_b} (compare runs of "
            "one scenario)"
        )
    _echo_compare(result.unlike, compare_table(result, run_a, run_b))


def _echo_compare(unlike: Sequence[str], table: Table) -> None:
    """The `!!` lines of what makes the two unlike first, then the table."""
    for line in unlike:
        click.echo(f"!! {line}")
    click.echo(render_rich([table], []), nl=False)
