"""The wall-clock live view: its title names the rep it is in (none before the first), and both
live views fit an 80-column terminal with every heading whole."""

from __future__ import annotations

import io
import re
from types import SimpleNamespace
from typing import Any

from rich.console import Console

from loadgen.engine.progress import Progress
from loadgen.engine.virtual_progress import VirtualProgress
from loadgen.scenario.load import load_scenario
from loadgen.scenario.plan import plan

ARM = plan(load_scenario("politeness", [])).arms[1]
HEADINGS = ("queued", "awaiting 1st byte", "streaming", "done", "failed", "server run/wait",
            "kv%", "gen tok/s")  # fmt: skip


def at_80(view: Any) -> str:
    console = Console(file=io.StringIO(), width=80, force_terminal=True, color_system=None)
    console.print(view._render())
    return console.file.getvalue()  # type: ignore[attr-defined,no-any-return]


def words(text: str) -> str:
    """The table's words in reading order, box lines dropped (a heading may wrap)."""
    return " ".join(re.sub(r"[│┃┏┓┗┛┡┩└┘┌┐━─╇╋┳┻┼┬┴]", " ", text).split())


def wall_view() -> Progress:
    return Progress(ARM, SimpleNamespace(last=None), enabled=False)  # type: ignore[arg-type]


def test_the_title_says_before_rep_0_then_the_rep() -> None:
    view = wall_view()
    before = words(at_80(view))
    assert "politeness · arm max_num_batched_tokens=1024 · before rep 0 ·" in before
    assert "rep -1" not in before
    view.start_rep(ARM.reps[0])
    assert "politeness · arm max_num_batched_tokens=1024 · rep 0 ·" in words(at_80(view))


def test_the_wall_view_fits_80_columns_with_whole_headings() -> None:
    text = at_80(wall_view())
    assert "…" not in text
    assert max(map(len, text.splitlines())) <= 80
    header = words("\n".join(text.splitlines()[1:5]))
    for heading in HEADINGS:
        for word in heading.split():
            assert word in header.split(), (word, header)


def test_the_virtual_view_fits_80_columns_with_whole_headings() -> None:
    view = VirtualProgress(ARM, lambda: 0, lambda: 0, enabled=False, wall_s=lambda: 0.0)
    text = at_80(view)
    assert "…" not in text
    assert max(map(len, text.splitlines())) <= 80
