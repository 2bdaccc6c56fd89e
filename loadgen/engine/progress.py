"""A live view of a run (rich): streams queued, in flight, done, failed; the server's own
running / waiting / kv% from the last metrics poll; generation tok/s from its counter.

Both clocks' views count in the plan's units (ArmProgress): measured streams, a session's turns
and tool results included, against the arm's `planned_streams`; warmups and cache primes are
sent but are not planned streams, so neither view counts them."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Self

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from loadgen.client.loops import Backend
from loadgen.engine.poller import MetricsPoller
from loadgen.records import StreamRecord
from loadgen.request import StreamRequest
from loadgen.scenario.plan import ArmPlan, RepPlan


class LiveView:
    """A table redrawn a few times a second on stderr (rich Live, its own refresh thread), only
    when enabled and stderr is a terminal; a subclass says what the table shows (`_render`)."""

    def __init__(self, *, enabled: bool, console: Console | None = None) -> None:
        self._console = console or Console(stderr=True)
        self._enabled = enabled and self._console.is_terminal
        self._live: Live | None = None

    def __enter__(self) -> Self:
        if self._enabled:
            self._live = Live(
                get_renderable=self._render, console=self._console, refresh_per_second=4
            )
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)

    def _render(self) -> Any:
        raise NotImplementedError


def live_table(title: str, columns: Sequence[str], row: Sequence[str]) -> Table:
    """One row of numbers under `title`; a heading wraps between its words and is never cut
    (at 80 columns the wall view printed "awaiti…", "stream…", "run/w…")."""
    table = Table(title=Text(title))
    for col in columns:
        table.add_column(Text(col), justify="right", overflow="fold",
                         min_width=max(map(len, col.split())))  # fmt: skip
    table.add_row(*row)
    return table


# Elapsed time sits in the title: with a column of its own the row needs 84 columns.
COLUMNS = ("queued", "awaiting 1st byte", "streaming", "done", "failed", "server run/wait", "kv%",
           "gen tok/s")  # fmt: skip


class ArmProgress(LiveView):
    """One arm's view: measured streams done and failed, of the arm's planned streams."""

    def __init__(self, arm: ArmPlan, *, enabled: bool, console: Console | None = None) -> None:
        super().__init__(enabled=enabled, console=console)
        self.planned = arm.planned_streams
        self.done_ok = 0
        self.failed = 0

    def done(self, rec: StreamRecord) -> None:
        if rec.phase != "measure":
            return
        if rec.status == "ok":
            self.done_ok += 1
        else:
            self.failed += 1


class Progress(ArmProgress):
    """The wall clock's view: also sends, lateness and the server's last poll."""

    def __init__(
        self,
        arm: ArmPlan,
        poller: MetricsPoller,
        *,
        enabled: bool,
        live_counts: Callable[[], tuple[int, int]] = lambda: (0, 0),
    ) -> None:
        super().__init__(arm, enabled=enabled)
        self._arm = arm
        self._live_counts = live_counts
        self._poller = poller
        self._t0 = time.perf_counter()
        self._rep: int | None = None  # None until the first rep (warmups, primes run first)
        self.sent = 0
        self.max_late_ms = 0.0
        self._prev_gen: tuple[float, float] | None = None
        self._gen_rate = 0.0

    def start_rep(self, rep: RepPlan) -> None:
        self._rep = rep.rep

    def watch(self, backend: Backend) -> Backend:
        """The backend, counting each measured send (a rep's requests and its sessions' turns go
        through it; warmups and primes do not)."""
        return _Counting(backend, self)

    def done(self, rec: StreamRecord) -> None:
        super().done(rec)
        if rec.t_sent_ns is not None and rec.phase == "measure":
            late_ms = (rec.t_sent_ns - rec.t_intended_ns) / 1e6
            self.max_late_ms = max(self.max_late_ms, round(late_ms, 3))

    def _render(self) -> Any:
        rep = "before rep 0" if self._rep is None else f"rep {self._rep}"
        elapsed = f"{time.perf_counter() - self._t0:.1f}s"
        title = f"{self._arm.scenario.name} · arm {self._arm.name} · {rep} · {elapsed}"
        values = self._poller.last.values if self._poller.last else {}
        awaiting, streaming = self._live_counts()
        row = (
            str(max(self.planned - self.sent, 0)),
            str(awaiting),
            str(streaming),
            str(self.done_ok),
            str(self.failed),
            f"{values.get('num_requests_running', float('nan')):.0f}/"
            f"{values.get('num_requests_waiting', float('nan')):.0f}",
            f"{100 * values.get('kv_cache_usage_perc', float('nan')):.1f}",
            f"{self._generation_rate(values):.0f}",
        )
        return live_table(title, COLUMNS, row)

    def _generation_rate(self, values: dict[str, float]) -> float:
        """Server generation tokens/s between the last two distinct polls (a token rate)."""
        gen = values.get("generation_tokens_total")
        if gen is None or self._poller.last is None:
            return self._gen_rate
        now = self._poller.last.t_ns / 1e9
        if self._prev_gen is not None and now > self._prev_gen[0]:
            self._gen_rate = (gen - self._prev_gen[1]) / (now - self._prev_gen[0])
        if self._prev_gen is None or now > self._prev_gen[0]:
            self._prev_gen = (now, gen)
        return self._gen_rate


class _Counting:
    def __init__(self, backend: Backend, progress: Progress) -> None:
        self._backend = backend
        self._progress = progress

    async def stream(self, req: StreamRequest) -> StreamRecord:
        self._progress.sent += 1
        return await self._backend.stream(req)
