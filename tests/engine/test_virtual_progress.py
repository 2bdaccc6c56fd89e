"""The live views of a run: the virtual clock's numbers at a given state, its rules for showing,
and the wall and virtual views counting the same streams."""

from __future__ import annotations

import dataclasses
import io

from rich.console import Console

from loadgen.engine.poller import MetricsPoller
from loadgen.engine.progress import Progress
from loadgen.engine.virtual_progress import VirtualProgress, planned_virtual_ns
from loadgen.records import StreamError
from loadgen.scenario.load import load_scenario
from loadgen.scenario.plan import plan

from support.cli import loadgen
from support.run_fixtures import record

NS = 1_000_000_000


def politeness_arm():  # type: ignore[no-untyped-def]
    return plan(load_scenario("politeness", [])).arms[1]


def terminal() -> Console:
    return Console(file=io.StringIO(), force_terminal=True, width=160, color_system=None)


def test_the_plan_gives_streams_and_the_last_arrival() -> None:
    arm = politeness_arm()
    assert arm.planned_streams == 4  # a whale and three minnows
    assert planned_virtual_ns(arm) == NS // 2  # the whale is sent at 0.5 s
    closed = dataclasses.replace(
        arm, reps=tuple(dataclasses.replace(r, concurrency=2, duration_ns=None) for r in arm.reps)
    )
    assert planned_virtual_ns(closed) == NS // 2  # offsets still planned
    timed = dataclasses.replace(
        arm, reps=tuple(dataclasses.replace(r, duration_ns=30 * NS) for r in arm.reps)
    )
    assert planned_virtual_ns(timed) == 30 * NS


def test_the_row_shows_virtual_time_streams_in_flight_wall_and_speed_up() -> None:
    arm = politeness_arm()
    now = {"ns": 0, "wall": 100.0}
    progress = VirtualProgress(
        arm, lambda: now["ns"], lambda: 3, enabled=False, wall_s=lambda: now["wall"]
    )
    ok = record(phase="measure")
    progress.done(ok)
    progress.done(dataclasses.replace(ok, status="error", error=StreamError("http_503", "x")))
    progress.done(dataclasses.replace(ok, phase="warmup"))  # not a measured stream
    now["ns"], now["wall"] = 90 * NS, 102.0
    assert progress.row() == ("90.0 / 0.5", "2 / 4", "1", "3", "2.0s", "45.0x")


def test_the_table_is_drawn_on_a_terminal_only_when_enabled() -> None:
    arm = politeness_arm()
    shown, hidden = terminal(), terminal()
    for console, enabled in ((shown, True), (hidden, False)):
        with VirtualProgress(arm, lambda: 7 * NS, lambda: 1, enabled=enabled, console=console):
            pass
    text = shown.file.getvalue()  # type: ignore[attr-defined]
    assert "politeness · arm max_num_batched_tokens=1024 · virtual clock" in text
    assert "7.0 / 0.5" in text and "speed-up" in text
    assert hidden.file.getvalue() == ""  # type: ignore[attr-defined]


def test_the_cli_shows_it_on_a_terminal_and_not_with_no_progress(tmp_path) -> None:  # type: ignore[no-untyped-def]
    tty = {"TTY_COMPATIBLE": "1", "COLUMNS": "160"}
    shown = loadgen("run", "smoke", "--clock", "virtual", "--out", tmp_path / "a", env=tty)
    quiet = loadgen(
        "run", "smoke", "--clock", "virtual", "--out", tmp_path / "b", "--no-progress", env=tty
    )
    assert shown.returncode == 0 and quiet.returncode == 0, shown.stderr + quiet.stderr
    assert "smoke · arm default · virtual clock" in shown.stderr
    assert "4 / 4" in shown.stderr
    assert "virtual clock" not in quiet.stderr and "speed-up" not in quiet.stderr


async def _no_metrics() -> str:
    return ""


def test_wall_and_virtual_views_count_the_same_streams_of_the_same_plan() -> None:
    """Both count measured streams, a tool's result request included, of the arm's planned
    streams; a warmup or a cache prime is sent but is not a planned stream (the wall view
    once counted them as done, and planned only the reps' plain requests: 0 for sessions)."""
    arm = plan(load_scenario("agent_tools", [])).arms[0]
    poller = MetricsPoller(_no_metrics, lambda sample: None, interval_s=1.0, run_start_ns=0)
    wall = Progress(arm, poller, enabled=False)
    virtual = VirtualProgress(arm, lambda: 0, lambda: 0, enabled=False)
    ok = record(phase="measure")
    for rec in (
        ok,
        dataclasses.replace(ok, status="error", error=StreamError("http_503", "x")),
        dataclasses.replace(ok, phase="warmup"),
        dataclasses.replace(ok, phase="prime"),
    ):
        wall.done(rec)
        virtual.done(rec)
    sessions = sum(len(rep.sessions) for rep in arm.reps)
    turns = sum(len(s.turns) for rep in arm.reps for s in rep.sessions)
    assert sessions > 0 and turns > sessions  # multi-turn, so a per-turn count shows
    assert wall.planned == virtual.planned == 2 * turns  # each turn: the call, then the result
    assert (wall.done_ok, wall.failed) == (virtual.done_ok, virtual.failed) == (1, 1)
