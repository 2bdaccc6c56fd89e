"""`loadgen export RUN_DIR`: a run's streams (and a sweep's arms) as CSV files."""

from __future__ import annotations

from pathlib import Path

import click

from loadgen.analysis.inputs import is_run_dir, is_sweep_dir
from loadgen.report.export import export
from loadgen.report.readable import readable


@click.command("export")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--out", "out", type=click.Path(path_type=Path), default=None,
              help="Folder for the CSV files (default: RUN_DIR itself).")  # fmt: skip
def export_cmd(run_dir: Path, out: Path | None) -> None:
    """Write RUN_DIR's measured streams as streams.csv (one row per stream of every arm) and, for
    a sweep, its arms as arms.csv (swept values, throughput, latency p50/p90, goodput, tokens/s
    per user, Pareto mark); prints the paths written."""
    if not (is_run_dir(run_dir) or is_sweep_dir(run_dir)):
        raise click.ClickException(
            f"{run_dir}: not a run directory (no streams.jsonl, no arms/); pass a directory "
            "`loadgen run` wrote, such as runs/<timestamp>-<scenario>"
        )
    target = run_dir if out is None else out
    with readable(run_dir):
        try:
            exported = export(run_dir, target)
        except OSError as e:
            raise click.ClickException(
                f"{target}: cannot write the CSV files ({e.strerror or e}); pass --out a "
                "writable folder"
            ) from None
    for path in exported.paths:
        click.echo(str(path))
    for note in exported.notes:
        click.echo(note, err=True)
