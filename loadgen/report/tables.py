"""A table as data, rendered as plain text (report.txt), rich (terminal) or HTML, and the
number formats every report uses."""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from loadgen.analysis.summary_types import MinMax, Stats, read_stats

DASH = "-"
# Past this a single word (a stream id, a path) may fold: the table must still fit the terminal.
_MAX_MIN_WIDTH = 40


@dataclass(frozen=True)
class Table:
    """Cells as strings; `left` names the columns aligned left (text), the rest align right."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    notes: tuple[str, ...] = ()
    left: frozenset[int] = frozenset({0})


def to_plain(t: Table) -> str:
    """Fixed-width columns, two spaces apart; notes indented below."""
    cells = [t.columns, *t.rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(t.columns))]

    def line(row: tuple[str, ...]) -> str:
        parts = [
            c.ljust(w) if i in t.left else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    out = [t.title, line(t.columns), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in t.rows]
    out += [f"  {n}" for n in t.notes]
    return "\n".join(out)


def to_rich(t: Table) -> Any:
    """A rich.table.Table of the same cells, each a rich Text: markup is never read from a
    report's words (`pip install 'loadgen[gpu]'` printed as `pip install 'loadgen'`)."""
    from rich.table import Table as RichTable
    from rich.text import Text

    caption = Text("\n".join(t.notes)) if t.notes else None
    rt = RichTable(title=Text(t.title), title_justify="left", caption=caption)
    rt.caption_justify = "left"
    for i, c in enumerate(t.columns):
        # A column is never narrower than its longest word and folds rather than cuts: rich's
        # default ellipsis printed verdicts as "refere…"/"unreso…" in a 120-column terminal.
        words = [w for r in t.rows for w in r[i].split()] + c.split()
        rt.add_column(
            Text(c),
            justify="left" if i in t.left else "right",
            no_wrap=i == 0,
            overflow="fold",
            min_width=min(max(map(len, words), default=1), _MAX_MIN_WIDTH),
        )

    for r in t.rows:
        rt.add_row(*map(Text, r))
    return rt


def to_html(t: Table) -> str:
    """An HTML <table> with its title as caption and notes as a footer paragraph."""
    esc = html.escape

    def cells(row: tuple[str, ...], tag: str) -> str:
        return "".join(
            f"<{tag} class='l'>{esc(c)}</{tag}>" if i in t.left else f"<{tag}>{esc(c)}</{tag}>"
            for i, c in enumerate(row)
        )

    head = cells(t.columns, "th")
    body = "".join(f"<tr>{cells(r, 'td')}</tr>" for r in t.rows)

    notes = "".join(f"<p class='note'>{esc(n)}</p>" for n in t.notes)
    return (
        # The wrapper scrolls sideways: a 10-arm table is wider than a 1400 px page.
        f"<section class='table'><h3>{esc(t.title)}</h3><div class='wide'><table><thead>"
        f"<tr>{head}</tr></thead><tbody>{body}</tbody></table></div>{notes}</section>"
    )


def secs(x: float | None) -> str:
    """Seconds: 3 decimals under 10 s, 1 above."""
    if x is None:
        return DASH
    return f"{x:.3f}" if abs(x) < 10 else f"{x:.1f}"


def rate(x: float | None) -> str:
    """A rate: 1 decimal under 100, none above."""
    if x is None:
        return DASH
    return f"{x:.1f}" if abs(x) < 100 else f"{x:.0f}"


def msecs(x: float | None) -> str:
    """Milliseconds: 2 decimals under 10 ms (a sim's TPOT of 2.00 vs 2.06 ms), 1 under 100,
    none above."""
    if x is None:
        return DASH
    return f"{x:.2f}" if abs(x) < 10 else f"{x:.1f}" if abs(x) < 100 else f"{x:.0f}"


def num(x: float | None, digits: int = 1) -> str:
    return DASH if x is None else f"{x:.{digits}f}"


def count(x: float | None) -> str:
    return DASH if x is None else f"{x:g}"


def text_or_dash(x: object) -> str:
    """A value as it prints, a dash for None."""
    return DASH if x is None else str(x)


def format_of(unit: str) -> Callable[[Any], str]:
    """How a value of a registered metric's unit is printed (analysis/registry.py)."""
    return {"s": secs, "tok/s": rate, "chunks/s": rate, "tok/chunk": _two}.get(unit, str)


def _two(x: float | None) -> str:
    return num(x, 2)


def triple(d: Stats | MinMax | Mapping[str, Any] | None, fmt: Any = rate) -> str:
    """min/median/max of a metric's statistics (one value for one stream)."""
    st = d if isinstance(d, Stats | MinMax) else read_stats(d)
    if st.n == 0:
        return DASH
    if st.n == 1:
        return fmt(st.median)
    return f"{fmt(st.min)}/{fmt(st.median)}/{fmt(st.max)}"


def span(st: Stats | MinMax, fmt: Any = rate) -> str:
    """min-max of a metric's statistics (one value when they agree)."""
    if not st.n:
        return DASH
    lo, hi = fmt(st.min), fmt(st.max)
    return lo if lo == hi else f"{lo}-{hi}"
