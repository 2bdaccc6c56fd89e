"""`loadgen soak`: a scenario's groups sent back to back (closed loop) until a duration is up,
into one run directory that `loadgen report` turns into the soak report.

Each pass over the groups is one rep of the plan (fresh salts and text, the groups interleaved
in proportion to their counts); reps follow each other until the deadline, or until the plan's
request cap (model.DURATION_REQUEST_CAP), whichever comes first; run.json says which. The
duration is on the server's clock: the sim's engine time at its `speed`, wall time for a real
server. A server that stops answering ends the soak (SoakStop), and run.json says when and why.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from loadgen.analysis.soak_types import SERVER_STOPS
from loadgen.records import StreamRecord
from loadgen.run_manifest import SoakEndInfo
from loadgen.scenario.model import DURATION_REQUEST_CAP, Closed, Scenario, Soak

# Consecutive failed streams that end a soak: refused connections say the server is gone;
# any other failure, this many times in a row, says nothing is being measured any more.
GONE_AFTER = 3
FAILING_AFTER = 10
GONE_CLASSES = ("connect_error", "connect_timeout")


def soak_scenario(scenario: Scenario, soak: Soak) -> Scenario:
    """The scenario as a soak: one closed-loop pass over the groups per rep, enough reps to
    reach the request cap (the deadline ends it long before, normally). Session groups keep
    their arrival: a conversation is already a closed loop of its turns, and a pass ends when
    its conversations do (a conversation under way at the deadline is finished)."""
    per_pass = sum(g.count * (g.session.turns if g.session else 1) for g in scenario.groups)
    sessions = any(g.session or g.replays_turns for g in scenario.groups)
    return dataclasses.replace(
        scenario,
        arrival=scenario.arrival if sessions else Closed(soak.concurrency, count=per_pass),
        repetitions=max(1, math.ceil(DURATION_REQUEST_CAP / per_pass)),
        sweep=None,
        soak=soak,
    )


class SoakStop:
    """When the soak stops: its deadline on the server's clock, or the server going away.
    `see` is given every record as it is written; `stopped()` is asked before each send."""

    def __init__(self, duration_s: float) -> None:
        self.duration_s = duration_s
        self._deadline_ns: int | None = None
        self._clock: Callable[[], int] = lambda: 0
        self._failed_in_row = 0
        self._gone_in_row = 0
        self.reason: str | None = None
        self.detail: str | None = None
        self.at_s: float | None = None

    def start(self, speed: float, clock: Callable[[], int]) -> None:
        """Starts the deadline: `clock` gives ns on the run clock; a sim at `speed` covers
        duration_s of its clock in duration/speed."""
        self._clock = clock
        self._deadline_ns = self._clock() + round(self.duration_s / speed * 1e9)

    def stopped(self) -> bool:
        deadline = self._deadline_ns
        if self.reason is None and deadline is not None and self._clock() >= deadline:
            self._stop("duration reached", f"the {self.duration_s:g} s duration on the server's "
                       "clock")  # fmt: skip
        return self.reason is not None

    def see(self, rec: StreamRecord) -> None:
        if rec.phase != "measure":
            return
        if rec.status == "ok":
            self._failed_in_row = self._gone_in_row = 0
            return
        cls = rec.error.cls if rec.error else "error"
        self._failed_in_row += 1
        self._gone_in_row = self._gone_in_row + 1 if cls in GONE_CLASSES else 0
        message = f"{cls}: {rec.error.message if rec.error else ''}"
        if self._gone_in_row >= GONE_AFTER:
            self._stop("server unreachable", f"{GONE_AFTER} refused streams in a row; {message}")
        elif self._failed_in_row >= FAILING_AFTER:
            self._stop("server failing", f"{FAILING_AFTER} failed streams in a row; {message}")

    def plan_exhausted(self) -> None:
        self._stop("request cap reached", f"{DURATION_REQUEST_CAP} requests planned")

    def server_gone(self, message: str) -> None:
        self._stop("server unreachable", message)

    @property
    def server_stopped(self) -> bool:
        """The server, not the duration or the user, ended the soak."""
        return self.reason in SERVER_STOPS

    def _stop(self, reason: str, detail: str) -> None:
        if self.reason is None:
            self.reason, self.detail = reason, detail
            self.at_s = self._clock() / 1e9

    def end(self) -> SoakEndInfo:
        """run.json's soak_end: how the soak stopped, as it stands."""
        return SoakEndInfo(self.reason, self.detail, self.at_s, self.duration_s)
