"""The terminal's tables print their text as written: rich's markup never reads a cell, a
heading, a title or a note (`pip install 'loadgen[gpu]'` printed as `pip install 'loadgen'`)."""

from __future__ import annotations

from loadgen.report.tables import Table
from loadgen.report.text import render_rich

HINT = "no GPU telemetry: pynvml is not installed (pip install 'loadgen[gpu]')"


def test_markup_in_any_part_of_a_table_is_printed_as_text() -> None:
    table = Table("title [b]x[/b]", ("col [red]", "n"), (("[bold]cell[/bold]", "[1]"),), (HINT,))
    # A caption wraps at the table's width: read the words, not the lines.
    shown = " ".join(render_rich([table], [], width=200).split())
    assert HINT in shown
    for text in ("title [b]x[/b]", "col [red]", "[bold]cell[/bold]", "[1]"):
        assert text in shown, text


def test_a_table_without_brackets_renders_as_before() -> None:
    table = Table("GPU energy", ("source", "J"), (("nvml", "12.5"),), ("energy from the counter",))
    shown = " ".join(render_rich([table], [], width=80).split())
    assert "GPU energy" in shown and "energy from the counter" in shown
    assert "nvml" in shown and "12.5" in shown
