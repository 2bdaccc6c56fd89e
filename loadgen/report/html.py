"""report.html: one self-contained page (figures as base64 PNG data URIs, inline CSS, no
script, nothing fetched), with the same tables as report.txt."""

from __future__ import annotations

import base64
import html
from collections.abc import Callable, Mapping
from typing import Any

from loadgen.analysis.registry import metric
from loadgen.analysis.summary import Analysis
from loadgen.analysis.summary_types import read_run, read_stream_rows
from loadgen.analysis.sweep_types import SweepSummary
from loadgen.report import plots
from loadgen.report.sweep_text import arm_titles, sweep_header, sweep_tables
from loadgen.report.tables import DASH, Table, format_of, to_html
from loadgen.report.text import header, hist_lines, run_tables

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px 32px; color: #1d1d1f; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 18px; margin: 28px 0 8px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
.meta { color: #444; margin: 2px 0; } .warn { color: #b00020; font-weight: 600; margin: 2px 0; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
th, td { border-bottom: 1px solid #ddd; padding: 3px 10px; text-align: right; white-space: nowrap; }
th.l, td.l { text-align: left; } th { background: #f4f4f6; }

.note { color: #555; font-size: 12px; margin: 2px 0; }
img.plot { max-width: 100%; border: 1px solid #e3e3e3; margin: 6px 0; }
.wide { overflow-x: auto; max-width: 100%; } section.table { min-width: 0; max-width: 100%; }
.tables { display: flex; flex-wrap: wrap; gap: 8px 40px; }
details { margin-top: 20px; } summary { cursor: pointer; font-weight: 600; }
pre.report { font-size: 13px; overflow-x: auto; }
"""


Column = tuple[str, str, Callable[[Any], str]]


def _metric_columns(*fields: str) -> tuple[Column, ...]:
    """(field, header, format) of registered metrics, each printed as its unit says."""
    return tuple((f, metric(f).column, format_of(metric(f).unit)) for f in fields)


STREAM_COLUMNS: tuple[Column, ...] = (
    ("id", "id", str),
    ("group", "group", str),
    ("rep", "rep", str),
    ("phase", "phase", str),
    ("verdict", "verdict", str),
    *_metric_columns("ttft_s", "decode_tok_s", "chunks_per_s", "completion_tokens", "chunks"),
    ("token_source", "token source", str),
    *_metric_columns("e2e_s"),
)


def _img(png: bytes | None, alt: str, missing: str) -> str:
    if png is None:
        return f"<p class='note'>{html.escape(missing)}</p>"
    data = base64.b64encode(png).decode("ascii")
    return f"<img class='plot' alt='{html.escape(alt)}' src='data:image/png;base64,{data}'>"


def _streams_table(streams: list[dict[str, Any]]) -> str:
    table = Table(
        f"All streams ({len(streams)})",
        tuple(label for _, label, _ in STREAM_COLUMNS),
        tuple(
            tuple(DASH if s[k] is None else fmt(s[k]) for k, _, fmt in STREAM_COLUMNS)
            for s in streams
        ),
        left=frozenset({0, 1, 3, 4, 10}),
    )
    return f"<details><summary>{len(streams)} streams</summary>{to_html(table)}</details>"


def _head_lines(lines: list[str]) -> str:
    out = []
    for line in lines:
        cls = "warn" if line.startswith("!!") else "meta"
        out.append(f"<p class='{cls}'>{html.escape(line)}</p>")
    return "".join(out)


def _title(lines: list[str]) -> str:
    """The report's title line: the first that is not a warning banner."""
    return next(line for line in lines if not line.startswith("!!"))


def _without_title(lines: list[str]) -> list[str]:
    title = _title(lines)
    return [line for line in lines if line != title]


def run_body(analysis: Analysis, sessions_png: bytes | None) -> str:
    """The body of one run's report: figures, tables, streams (`sessions_png` is drawn by the
    caller, which also writes it as a file)."""
    s = analysis.summary
    tables = "".join(to_html(t) for t in run_tables(s))
    return "".join(
        [
            _head_lines(_without_title(header(read_run(s))) + hist_lines(s)),
            "<h2>Stream timeline</h2>",
            _img(plots.timeline_png(read_stream_rows(s)), "stream timeline", "no streams"),
            "<h2>Tables</h2>",
            f"<div class='tables'>{tables}</div>",
            "<h2>Latency percentiles</h2>",
            _img(
                plots.percentiles_png(analysis.histograms),
                "latency percentiles",
                "no latencies recorded",
            ),
            *_sessions_section(sessions_png),
            "<h2>Server metrics</h2>",
            _img(plots.metrics_png(analysis.timeline), "server metrics", "no server metrics"),
            _streams_table(s["streams"]),
        ]
    )


def _sessions_section(png: bytes | None) -> list[str]:
    return [] if png is None else ["<h2>Sessions</h2>", _img(png, "sessions", "")]


def _page(title: str, body: str) -> str:
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head>"
        f"<body><h1>{html.escape(title)}</h1>{body}</body></html>\n"
    )


def render_text_html(text: str, figures: Mapping[str, bytes | None]) -> str:
    """report.html of a directory whose report is its text and figures (a capacity search, a
    fidelity check, a calibration): report.txt as it reads, each figure (by file name) under
    it; each step, point or run inside keeps its own report.html."""
    lines = text.splitlines()
    imgs = [_img(png, name.removesuffix(".png"), "") for name, png in figures.items() if png]
    return _page(_title(lines), f"<pre class='report'>{html.escape(text)}</pre>" + "".join(imgs))


def render_html(analysis: Analysis, body: str) -> str:
    """report.html of one run, around its `run_body`."""
    return _page(_title(header(read_run(analysis.summary))), body)


def render_sweep_html(
    s: SweepSummary,
    bodies: dict[str, str],
    figure: bytes | None = None,
    arms: dict[str, dict[str, Any]] | None = None,
    load_figures: dict[str, bytes] | None = None,
) -> str:
    """report.html of a sweep parent: the across-arm tables and figures (a load sweep's
    load.png and pareto.png, by file name; sweep_plot's, drawn against the swept flag), then
    each arm's report body (as rendered for the arm's own report.html: drawing every figure
    again would double the report's cost)."""
    head = sweep_header(s, arms)
    parts = [_head_lines(_without_title(head))]
    parts += [to_html(t) for t in sweep_tables(s)]
    if load_figures:
        parts.append("<h2>Load sweep</h2>")
        parts += [_img(png, name.removesuffix(".png"), "") for name, png in load_figures.items()]
    if figure is not None:
        parts.append("<h2>Across the sweep</h2>" + _img(figure, "sweep figure", ""))
    for name, title in arm_titles(s, bodies):
        parts.append(
            f"<h2 id='arm-{html.escape(name)}'>Arm {html.escape(title)}</h2>{bodies[name]}"
        )
    return _page(_title(head), "".join(parts))
