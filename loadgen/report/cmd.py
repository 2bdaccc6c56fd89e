"""`loadgen report RUN_DIR` and `loadgen compare RUN_A RUN_B`, plus what the engine calls at the
end of a run (write_report): everything is recomputed from the run directory's files."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
import orjson

from loadgen.analysis.calibration import is_calibration
from loadgen.analysis.capacity import analyze_capacity, is_capacity
from loadgen.analysis.compare import Comparison, unlike_runs
from loadgen.analysis.fidelity import fidelity_table, is_fidelity
from loadgen.analysis.hist import write_hlogs
from loadgen.analysis.inputs import arm_dirs, is_sweep_dir, read_manifest
from loadgen.analysis.soak import analyze_soak_dir, is_soak
from loadgen.analysis.soak_types import SoakSummary, read_soak
from loadgen.analysis.stats import canonical, dumps_canonical, median
from loadgen.analysis.summary import Analysis, analyze_run, write_summary
from loadgen.analysis.summary_types import RunSummary, read_run, read_stream_rows
from loadgen.analysis.sweep import analyze_sweep
from loadgen.analysis.sweep_types import SweepSummary, read_sweep
from loadgen.analysis.tune import VERIFY, VIRTUAL, analyze_tune, is_tune, read_tune
from loadgen.clock import ClockName
from loadgen.codec import to_json
from loadgen.redact import redact, redact_text
from loadgen.report.calibration_report import CALIBRATION_PNG, calibration_report
from loadgen.report.capacity_report import CAPACITY_PNG, capacity_figure, capacity_plain
from loadgen.report.fidelity_report import (
    FIDELITY_PNG,
    fidelity_figure,
    fidelity_text,
    measured_side,
)
from loadgen.report.html import render_html, render_sweep_html, render_text_html, run_body
from loadgen.report.load_plot import load_figures
from loadgen.report.plots import sessions_png
from loadgen.report.soak_report import soak_reason, write_soak_report
from loadgen.report.sweep_plot import SWEEP_PNG, sweep_figure
from loadgen.report.sweep_text import (
    arm_titles,
    render_sweep_plain,
    sweep_header,
    sweep_tables,
)
from loadgen.report.tables import DASH, Table, num
from loadgen.report.text import (
    header,
    hist_lines,
    lost_lines,
    record_lines,
    render_plain,
    render_rich,
    run_tables,
    user_server_lines,
    what_ran,
)
from loadgen.report.tune_report import TUNE_PNG, tune_figure, tune_plain


def _write_run(path: Path, analysis: Analysis) -> str:
    """Writes one run's files; returns its report.html body (a sweep's parent embeds it)."""
    s = analysis.summary
    # Everything is rendered before anything is written: a failure leaves no half a report.
    sessions = sessions_png(read_stream_rows(s))
    body = run_body(analysis, sessions)
    plain, html = render_plain(s), render_html(analysis, body)
    hist = path / "hist"
    if hist.exists() and not hist.is_dir():
        # A file where the folder should be: the rest of the report is still worth writing.
        click.echo(f"warning: {hist} is not a folder; histogram logs not written", err=True)
    else:
        write_hlogs(hist, analysis.histograms)
    write_summary(path, s)
    (path / "report.txt").write_text(redact_text(plain), encoding="utf-8")
    (path / "report.html").write_text(redact_text(html), encoding="utf-8")
    if sessions is not None:
        (path / "sessions.png").write_bytes(sessions)
    return body


def _run_rich(s: dict[str, Any]) -> str:
    return render_rich(run_tables(s), header(read_run(s)) + hist_lines(s))


def write_report(run_dir: Path, arm_tables: bool = False) -> str:
    """(Re)writes summary.json, report.txt, report.html and hist/ of a run directory (for a
    sweep directory: of every arm, plus the parent's summary.json, report.txt, report.html and
    figures: sweep.png, and a load sweep's load.png and pareto.png) and
    returns the report as the terminal shows it (a sweep's arms' own tables with
    `arm_tables`). Raises NotARunDirectory for anything else."""
    manifest = read_manifest(run_dir)
    if is_soak(manifest):
        return write_soak_report(run_dir)
    if is_capacity(manifest):
        return write_capacity_report(run_dir)
    if is_fidelity(manifest):
        return write_fidelity_report(run_dir)
    if is_calibration(manifest):
        return write_calibration_report(run_dir)
    if is_tune(manifest):
        return write_tune_report(run_dir)
    if not is_sweep_dir(run_dir):
        analysis = analyze_run(run_dir)
        shown = _run_rich(analysis.summary)
        _write_run(run_dir, analysis)
        return shown
    sweep, arms = analyze_sweep(run_dir)
    bodies = {name: _write_run(run_dir / "arms" / name, a) for name, a in arms.items()}
    (run_dir / "summary.json").write_bytes(dumps_canonical(sweep))
    s = read_sweep(sweep)
    summaries = {n: a.summary for n, a in arms.items()}
    plain = render_sweep_plain(s, summaries)
    (run_dir / "report.txt").write_text(plain, encoding="utf-8")
    figure, load = sweep_figure(s), load_figures(s)
    if figure is not None:
        (run_dir / SWEEP_PNG).write_bytes(figure)
    for name, png in load.items():
        (run_dir / name).write_bytes(png)
    (run_dir / "report.html").write_text(
        render_sweep_html(s, bodies, figure, summaries, load), encoding="utf-8"
    )
    return _sweep_rich(s, arms, arm_tables)


def write_capacity_report(root: Path) -> str:
    """A capacity directory's summary.json, report.txt and capacity.png (every step's own
    report too), recomputed from the steps' records; returns the report text."""
    summary, steps = analyze_capacity(root)
    for rel, analysis in steps.items():
        _write_run(root / rel, analysis)
    write_summary(root, summary)
    plain = capacity_plain(summary)
    _write_text_report(root, plain, {CAPACITY_PNG: capacity_figure(summary)})
    return plain


def _write_text_report(root: Path, plain: str, figures: dict[str, bytes | None]) -> None:
    """report.txt, the figures and report.html of a directory whose report is text and figures
    (a capacity search, a fidelity check, a calibration), credentials masked."""
    plain = redact_text(plain)
    (root / "report.txt").write_text(plain, encoding="utf-8")
    for name, png in figures.items():
        if png is not None:
            (root / name).write_bytes(png)
    (root / "report.html").write_text(render_text_html(plain, figures), encoding="utf-8")


def write_fidelity_report(root: Path) -> str:
    """A fidelity directory's two runs reported again (real/ and virtual/), then its
    fidelity.json, report.txt and fidelity.png from their summaries; returns the report."""
    f = read_manifest(root).fidelity
    if f is None:
        raise click.ClickException(f"{root}: run.json has no fidelity block")
    if f.real is None or f.virtual is None:
        sides = (("real", f.real), ("virtual", f.virtual))
        unfinished = " and ".join(side for side, run in sides if run is None)
        raise click.ClickException(
            f"{root}: the fidelity's {unfinished} run did not finish; run `loadgen fidelity` again"
        )
    for run in (f.real, f.virtual):
        write_report(root / run)
    real, virtual = (_arm_summaries(root / run) for run in (f.real, f.virtual))
    table = fidelity_table(real, virtual, f.tolerance)
    (root / "fidelity.json").write_bytes(dumps_canonical(redact(to_json(table))))
    head = [f"fidelity of sim profile {f.profile.name} ({f.profile.path}) on {f.scenario}",
            f"real: {f.real} | predicted: {f.virtual}"]  # fmt: skip
    measured = measured_side(read_run(next(iter(real.values()))))
    plain = fidelity_text(table, head, measured)
    figure = fidelity_figure(table, f"{f.scenario}: profile {f.profile.name}")
    _write_text_report(root, plain, {FIDELITY_PNG: figure})
    return plain


def write_tune_report(root: Path) -> str:
    """A tune directory's points (and verified boots) reported again, then its summary.json,
    report.txt and tune.png; returns the report."""
    for side in (VIRTUAL, VERIFY):
        if (root / side / "arms").is_dir():
            write_report(root / side)
    summary, _ = analyze_tune(root)
    write_summary(root, canonical(summary))
    t = read_tune(summary)
    plain = tune_plain(t)
    _write_text_report(root, plain, {TUNE_PNG: tune_figure(t)})
    return plain


def write_calibration_report(root: Path) -> str:
    """A calibration directory's report.txt, calibration.png and report.html, from the fit its
    profile.yaml holds (`loadgen calibrate --refit` fits the points again); returns the
    report."""
    if not (root / "profile.yaml").is_file():
        raise click.ClickException(
            f"{root}: the calibration has no profile.yaml (it stopped before the fit); "
            f"`loadgen calibrate --refit {root}` fits the points it recorded"
        )
    plain, figure = calibration_report(root)
    _write_text_report(root, plain, {CALIBRATION_PNG: figure})
    return plain


def _arm_summaries(run_dir: Path) -> dict[str, dict[str, Any]]:
    """Each arm's summary.json by arm name ("-" for a run without arms)."""
    arms = arm_dirs(run_dir) or [run_dir]
    return {
        ("-" if a == run_dir else a.name): orjson.loads((a / "summary.json").read_bytes())
        for a in arms
    }


def _sweep_rich(s: SweepSummary, arms: dict[str, Analysis], arm_tables: bool) -> str:
    """A sweep on the terminal: its header, every arm's tables where asked for, then the
    across-arm tables with the sweep's answer last."""
    tables: list[Table] = []
    lost = []  # an arm's skipped lines show on the terminal too, not only in its report.txt
    # Every arm's tables carry the same titles: without its name a block is anonymous.
    for name, title in arm_titles(s, arms):
        summary = arms[name].summary
        if arm_tables:
            tables += [replace(t, title=f"arm {title} | {t.title}") for t in run_tables(summary)]
        records = read_run(summary).records
        lost += [f"arm {name}: {x}" for x in record_lines(records) if x.startswith("!!")]
    head = sweep_header(s, {n: a.summary for n, a in arms.items()}) + lost
    if not arm_tables:
        head.append("each arm's own tables: report.txt, or --arm-tables to print them")
    return render_rich(tables + sweep_tables(s), head)


def render_report(run_dir: Path, arm_tables: bool = False) -> str:
    """The report of a run (or sweep) directory as the terminal shows it, writing nothing."""
    if is_sweep_dir(run_dir):
        sweep, arms = analyze_sweep(run_dir)
        return _sweep_rich(read_sweep(sweep), arms, arm_tables)
    return _run_rich(analyze_run(run_dir).summary)


def compare_table(result: Comparison, a: Path, b: Path) -> Table:
    """group | quantity | A | B | B - A | % | spread A / B | verdict."""
    rows = []
    for r in result.rows:
        rows.append(
            (
                r.group,
                f"{r.label} ({r.unit})",
                num(r.a, 3),
                num(r.b, 3),
                DASH if r.diff is None else f"{r.diff:+.3f}",
                DASH if r.diff_pct is None else f"{r.diff_pct:+.1f}%",
                f"{num(r.spread_a, 3)} / {num(r.spread_b, 3)}",
                r.verdict,
            )
        )
    notes = [_arm_note("A", a, result.runs[0]), _arm_note("B", b, result.runs[1])]
    notes += _clock_notes(run.clock for run in result.runs)
    notes.append("noise = max(rep spread A, rep spread B); spread = max - min")
    notes += [f"only in A: {g}" for g in result.only_a]
    notes += [f"only in B: {g}" for g in result.only_b]
    return Table(
        "Compare (B - A, per group; medians over measured streams)",
        ("group", "quantity", "A", "B", "B - A", "%", "spread A / B", "verdict"),
        tuple(rows),
        tuple(notes),
        left=frozenset({0, 1, 7}),
    )


def _clock_notes(clocks: Iterable[ClockName]) -> list[str]:
    if len(set(clocks)) < 2:
        return []
    return ["one run on the wall clock, one on the virtual clock: B - A is the sim's error with "
            "its profile (loadgen fidelity tabulates it per figure)"]  # fmt: skip


def _arm_note(label: str, path: Path, run: RunSummary) -> str:
    """'A = path', with what the user said about that run's server, so arms differ on paper."""
    said = [what_ran(run, read_manifest(path).sim_profile), *user_server_lines(run)]
    return f"{label} = {path}" + "".join(f"; {line}" for line in said)


def soak_pair(run_a: Path, run_b: Path, soaks: list[bool]) -> tuple[list[str], Table]:
    """Two soaks side by side in the soak report's own terms: decode tok/s per request on the
    server's clock (a run summary's is per wall second: x20 at sim speed 20, 4,192 vs 210) and
    each soak's drift verdict (its fixed-context trend, not the rep spread, which called a
    -23% drift within noise); first, why the two are not like for like."""
    if not all(soaks):
        soak, other = (run_a, run_b) if soaks[0] else (run_b, run_a)
        raise click.ClickException(
            f"cannot compare soak {soak} with non-soak run {other}: compare two soaks "
            "(drift verdicts) or two runs (per-group medians)"
        )
    a, b = (read_soak(analyze_soak_dir(p)) for p in (run_a, run_b))
    unlike = _unlike_soaks((run_a, run_b), (a, b))
    ra, rb = (median([p.rate for p in s.points]) for s in (a, b))
    diff = None if ra is None or rb is None else rb - ra
    pct = None if diff is None or not ra else 100 * diff / ra
    va, vb = a.verdict, b.verdict
    effect = [None if v.adjusted is None else 100 * v.adjusted.effect for v in (va, vb)]
    rows = (
        ("requests decoded", str(a.requests), str(b.requests), DASH, DASH),
        ("median decode tok/s", num(ra), num(rb), num(diff), num(pct)),
        ("drift at fixed context %", num(effect[0]), num(effect[1]), DASH, DASH),
        ("drift verdict", va.verdict, vb.verdict, DASH, DASH),
    )
    return unlike, Table(
        "Compare soaks (B - A; each soak's own drift verdict)",
        ("quantity", "A", "B", "B - A", "%"),
        rows,
        (
            f"A = {run_a}: {soak_reason(a)}",
            f"B = {run_b}: {soak_reason(b)}",
            "decode tok/s: per request, token-true, on the server's clock (the soak report's)",
            *_clock_notes((a.clock, b.clock)),
        ),
        left=frozenset({0}),
    )


def _unlike_soaks(paths: tuple[Path, Path], soaks: tuple[SoakSummary, SoakSummary]) -> list[str]:
    """A soak cut short, another scenario or plan (--duration, --window and --fault are the
    plan's), and records one side lost: the compare of two runs says each, and so does this."""
    a, b = soaks
    cut = (a.end.reason == "interrupted", b.end.reason == "interrupted")
    plans = (read_manifest(paths[0]).scenario, read_manifest(paths[1]).scenario)
    out = unlike_runs(cut, (a.scenario, b.scenario), plans)
    for side, s in zip("AB", soaks, strict=True):
        out += [f"{side}: {line.removeprefix('!! ')}" for line in
                ([] if s.records is None else lost_lines(s.records))]  # fmt: skip
    return out
