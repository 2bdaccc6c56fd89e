"""The run clock the send loops run on: the wall's (asyncio) and a virtual one (discrete events).

A loop needs three things of time: the instant now, a sleep until an absolute instant, and a
crew of tasks that run beside each other until all are done. `WallClock` is perf_counter_ns
and asyncio. `VirtualTime` is a scheduler of its own, for the sim on its event clock: its
coroutines run one at a time in a fixed order and park in `sleep_until` (a timer) or on a
`Pending` result; nothing moves its time but its driver, which between quiet points takes the
next event (a timer, or whatever the driver's own world has next) in time order. So the same
loop code is exact and repeatable there, and is the same code that runs on the wall.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections import deque
from collections.abc import Callable, Coroutine, Generator
from contextlib import AbstractAsyncContextManager
from enum import StrEnum
from typing import Any, Generic, Protocol, Self, TypeVar

T = TypeVar("T")
Work = Coroutine[Any, Any, None]


class ClockName(StrEnum):
    """Which clock a run is driven on: `--clock` parses it once, and run.json, summary.json
    and soak.json write its value ("wall": real time over HTTP; "virtual": the sim's engine on
    its event clock). A run.json without one ran on the wall (wall runs did not write it)."""

    WALL = "wall"
    VIRTUAL = "virtual"

    @classmethod
    def read(cls, value: str | None) -> ClockName:
        """A file's clock; none written is the wall's."""
        return cls.WALL if value is None else cls(value)


class Clock(Protocol):
    def now_ns(self) -> int: ...

    async def sleep_until(self, t_ns: int) -> None:
        """Returns at `t_ns` on this clock, at once if that is not in the future."""
        ...


class Crew(Protocol):
    """Tasks that run beside each other; leaving its `async with` waits for them all."""

    def create_task(self, coro: Work) -> object: ...


class LoopClock(Clock, Protocol):
    def crew(self) -> AbstractAsyncContextManager[Crew]: ...


class WallClock:
    """perf_counter_ns from `origin_ns` (a run's start: the run clock), asyncio's sleeps and
    task groups. Deadlines are absolute, so time spent between sleeps never accumulates."""

    def __init__(self, origin_ns: int = 0) -> None:
        self.origin_ns = origin_ns

    def now_ns(self) -> int:
        return time.perf_counter_ns() - self.origin_ns

    async def sleep_until(self, t_ns: int) -> None:
        delay_ns = self.origin_ns + t_ns - time.perf_counter_ns()
        if delay_ns > 0:
            await asyncio.sleep(delay_ns / 1e9)

    def crew(self) -> asyncio.TaskGroup:
        return asyncio.TaskGroup()


class _Strand:
    """One coroutine on virtual time, and the crew that waits for it (None: the root)."""

    __slots__ = ("coro", "crew", "done", "result")

    def __init__(self, coro: Coroutine[Any, Any, Any], crew: _VirtualCrew | None) -> None:
        self.coro, self.crew = coro, crew
        self.done = False
        self.result: Any = None


class _Park:
    """What a coroutine yields to VirtualTime to wait: at an instant, or for a crew."""

    __slots__ = ("crew", "t_ns")

    def __init__(self, t_ns: int | None = None, crew: _VirtualCrew | None = None) -> None:
        self.t_ns, self.crew = t_ns, crew

    def __await__(self) -> Generator[Any, Any, None]:
        yield self


class Pending(Generic[T]):
    """A result some callback sets later (the sim's record of a request); awaiting it parks
    the coroutine until then, or returns at once if it is already set."""

    __slots__ = ("_set", "_time", "_value", "_waiter")

    def __init__(self, owner: VirtualTime) -> None:
        self._time = owner
        self._set = False
        self._value: T | None = None
        self._waiter: _Strand | None = None

    def set(self, value: T) -> None:
        self._set, self._value = True, value
        if self._waiter is not None:
            self._time._wake(self._waiter, value)

    def __await__(self) -> Generator[Any, Any, T]:
        if not self._set:
            return (yield self)
        return self._value  # type: ignore[return-value]  # set: a T


class _VirtualCrew:
    def __init__(self, owner: VirtualTime) -> None:
        self._time = owner
        self.live = 0
        self.waiter: _Strand | None = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, *_: object) -> None:
        # A body that raised (or a coroutine being closed) does not wait for its tasks.
        if kind is None and self.live:
            await _Park(crew=self)

    def create_task(self, coro: Work) -> None:
        self.live += 1
        self._time._make_ready(_Strand(coro, self))


class VirtualTime:
    """Time that jumps from event to event; `now` reads it from the driver's world (the sim).

    Coroutines become ready in FIFO order (started, woken by a timer, a Pending set, their
    crew done) and each runs until it parks; `run_ready` runs them all until none is ready.
    Timers at one instant fire in the order they were set, one per `wake_next`, so the driver
    can put its own events between them."""

    def __init__(self, now: Callable[[], int]) -> None:
        self._now = now
        self._ready: deque[tuple[_Strand, Any]] = deque()
        self._timers: list[tuple[int, int, _Strand]] = []
        self._seq = itertools.count()
        # Started and not ended, in start order: closed if the run stops.
        self._live: dict[_Strand, None] = {}

    def now_ns(self) -> int:
        return self._now()

    async def sleep_until(self, t_ns: int) -> None:
        if t_ns > self._now():
            await _Park(t_ns)

    async def take_turn(self) -> None:
        """Parks until the driver takes this instant's next timer: an act (a send) made now
        waits behind those made before it at this instant, and behind nothing later."""
        await _Park(self._now())

    def crew(self) -> _VirtualCrew:
        return _VirtualCrew(self)

    def pending(self) -> Pending[Any]:
        return Pending(self)

    # -- the driver's side -----------------------------------------------------------------

    def start(self, coro: Coroutine[Any, Any, T]) -> _Strand:
        """Makes `coro` ready; the returned strand holds its result once done."""
        strand = _Strand(coro, None)
        self._make_ready(strand)
        return strand

    def run_ready(self) -> None:
        """Runs every ready coroutine until each has parked or ended."""
        while self._ready:
            strand, value = self._ready.popleft()
            try:
                park = strand.coro.send(value)
            except StopIteration as end:
                self._end(strand, end.value)
                continue
            self._park(strand, park)

    def next_timer_ns(self) -> int | None:
        return self._timers[0][0] if self._timers else None

    def wake_next(self) -> None:
        """Makes the earliest timer's coroutine ready (ties: the first one set)."""
        _, _, strand = heapq.heappop(self._timers)
        self._wake(strand)

    def close(self) -> None:
        """Closes every coroutine not yet ended (a stopped run): their `finally`s run."""
        live, self._live = self._live, {}
        self._ready.clear()
        self._timers.clear()
        for strand in live:
            strand.coro.close()

    def _make_ready(self, strand: _Strand) -> None:
        self._live[strand] = None
        self._wake(strand)

    def _wake(self, strand: _Strand, value: Any = None) -> None:
        """Queues `strand` to resume with `value` (what its await returns)."""
        self._ready.append((strand, value))

    def _park(self, strand: _Strand, park: object) -> None:
        if isinstance(park, Pending):
            park._waiter = strand
        elif isinstance(park, _Park) and park.crew is not None:
            park.crew.waiter = strand
        elif isinstance(park, _Park) and park.t_ns is not None:
            heapq.heappush(self._timers, (park.t_ns, next(self._seq), strand))
        else:
            raise TypeError(f"a coroutine on virtual time awaited {park!r}, not the clock")

    def _end(self, strand: _Strand, result: Any) -> None:
        self._live.pop(strand, None)
        strand.done, strand.result = True, result
        crew = strand.crew
        if crew is None:
            return
        crew.live -= 1
        if crew.live == 0 and crew.waiter is not None:
            self._wake(crew.waiter)
