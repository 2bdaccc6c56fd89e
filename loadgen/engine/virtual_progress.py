"""A live view of a run on the virtual clock: how far virtual time has got against the plan,
measured streams done of those planned, requests in flight, wall time, and the speed-up.

The driver never yields to an event loop, so the table is drawn by rich's refresh thread
(LiveView, a few times a second) reading plain counters; the driver's only cost is counting
each finished record. Shown under the same rules as the wall-clock view (--no-progress, and
only when stderr is a terminal)."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.console import Console
from rich.table import Table

from loadgen.engine.progress import ArmProgress, live_table
from loadgen.scenario.plan import ArmPlan

NS = 1_000_000_000
COLUMNS = ("virtual s / last arrival", "done / planned", "failed", "in flight", "wall", "speed-up")


def planned_virtual_ns(arm: ArmPlan) -> int | None:
    """The run-clock span the reps' arrivals are planned over (each rep's duration, else its
    last offset); None when a closed-loop rep has neither, so only the run can tell."""
    total = 0
    for rep in arm.reps:
        if rep.duration_ns is not None:
            total += rep.duration_ns
            continue
        offsets = [r.offset_ns for r in rep.requests] + [s.offset_ns for s in rep.sessions]
        if any(o is None for o in offsets):
            return None
        total += max((o for o in offsets if o is not None), default=0)
    return total


class VirtualProgress(ArmProgress):
    """Counts measured records as they end; reads the virtual clock and in-flight count only
    when it draws."""

    def __init__(
        self,
        arm: ArmPlan,
        now_ns: Callable[[], int],
        in_flight: Callable[[], int],
        *,
        enabled: bool,
        console: Console | None = None,
        wall_s: Callable[[], float] = time.perf_counter,
    ) -> None:
        super().__init__(arm, enabled=enabled, console=console)
        self._title = f"{arm.scenario.name} · arm {arm.name} · virtual clock"
        self._now_ns, self._in_flight, self._wall_s = now_ns, in_flight, wall_s
        self._t0 = wall_s()
        self._open_ended = arm.open_ended
        self._planned_ns = planned_virtual_ns(arm)

    def row(self) -> tuple[str, ...]:
        """The table's one row, now."""
        virtual_s = self._now_ns() / NS
        wall_s = self._wall_s() - self._t0
        planned_s = "?" if self._planned_ns is None else f"{self._planned_ns / NS:.1f}"
        bound = "≤" if self._open_ended else ""
        speed = f"{virtual_s / wall_s:.1f}x" if wall_s > 0 else "-"
        return (
            f"{virtual_s:.1f} / {planned_s}",
            f"{self.done_ok + self.failed} / {bound}{self.planned}",
            str(self.failed),
            str(self._in_flight()),
            f"{wall_s:.1f}s",
            speed,
        )

    def _render(self) -> Table:
        return live_table(self._title, COLUMNS, self.row())
