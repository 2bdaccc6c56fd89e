"""The send loops, once for both clocks: an open loop on a schedule (capped or not), or a closed
loop.

A loop knows nothing of HTTP or of the sim: it is given a `LoopClock` (loadgen/clock.py: the
wall's, or the sim's virtual time) and a `Send`, which sends one item intended at an instant and
returns its record, never raising for server faults (OpenAIClient.stream through `stream_at`,
the virtual sim's submit, or a fake in tests).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Sequence
from typing import Any, Generic, Protocol, TypeVar

from loadgen.clock import Clock, LoopClock
from loadgen.records import StreamRecord
from loadgen.request import StreamRequest, intended_at


class Backend(Protocol):
    async def stream(self, req: StreamRequest) -> StreamRecord: ...


OnRecord = Callable[[StreamRecord], None]
T = TypeVar("T")
# Sends one item intended at an instant (run clock) and returns its record.
Send = Callable[[T, int], Awaitable[StreamRecord]]
# Starts one item's work at its instant: a request's send, or a whole conversation.
Start = Callable[[T, int], Coroutine[Any, Any, None]]


class ClosedSeats(Generic[T]):
    """A closed loop's seats: `concurrency` of them, each taking the next item as its last one
    ends; none from `end_ns` on (a duration) or once `stop` says so (a soak's deadline). The
    rule stands apart from the loop to be tested on its own: when each clock had a loop of its
    own, the wall clock once ran a 1 s closed-loop duration for 10,000 requests while the
    virtual one stopped at 1 s."""

    def __init__(
        self,
        items: Sequence[T],
        concurrency: int,
        *,
        end_ns: int | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> None:
        self._pending: Iterator[T] = iter(items)
        self._seats = min(concurrency, len(items))
        self._end_ns, self._stop = end_ns, stop

    def first(self, now_ns: int) -> list[T]:
        """The items the seats start with at `now_ns`."""
        firsts = (self.take(now_ns) for _ in range(self._seats))
        return [item for item in firsts if item is not None]

    def take(self, now_ns: int) -> T | None:
        """The next item for a seat free at `now_ns`; None: the seat stays empty."""
        if self._end_ns is not None and now_ns >= self._end_ns:
            return None
        if self._stop is not None and self._stop():
            return None
        return next(self._pending, None)


def stream_at(backend: Backend) -> Send[StreamRequest]:
    """Sends a request through `backend`, stamped with the instant it was intended at."""

    async def send(req: StreamRequest, intended_ns: int) -> StreamRecord:
        return await backend.stream(intended_at(req, intended_ns))

    return send


def recorded(send: Send[T], on_record: OnRecord) -> Start[T]:
    """An open loop's start for plain requests: send the item, record its record."""

    async def start(item: T, intended_ns: int) -> None:
        on_record(await send(item, intended_ns))

    return start


def record_end(rec: StreamRecord, clock: Clock) -> int:
    """When `rec`'s stream ended on the run clock. The virtual sim hands a record over when the
    step that ends it is computed, before that step's end, so its own t_done is the instant."""
    return rec.t_done_ns if rec.t_done_ns is not None else clock.now_ns()


async def run_open_loop(
    arrivals: Iterable[tuple[int, T]],
    start: Start[T],
    clock: LoopClock,
    *,
    stop: Callable[[], bool] | None = None,
) -> None:
    """Starts each item at its instant (run clock), never waiting for earlier ones to end, so
    a slow server cannot slow the arrival process (no coordinated omission). An item that
    starts late keeps its intended instant; the client records the actual one. Items of one
    instant start in the order given. None starts once `stop` says so; those started finish."""
    async with clock.crew() as crew:
        for t_ns, item in sorted(arrivals, key=lambda a: a[0]):
            await clock.sleep_until(t_ns)
            if stop is not None and stop():
                break
            crew.create_task(start(item, t_ns))


async def run_closed_loop(
    items: Sequence[T],
    send: Send[T],
    on_record: OnRecord,
    clock: LoopClock,
    *,
    concurrency: int,
    stop: Callable[[], bool] | None = None,
    duration_ns: int | None = None,
) -> None:
    """`concurrency` seats, each sending its next item as soon as its last one ended; the
    intended send is that moment (a closed loop has no schedule to fall behind). No item is
    sent `duration_ns` after the start, nor once `stop` says so; those in flight finish."""
    start = clock.now_ns()
    end = None if duration_ns is None else start + duration_ns

    async def serve(item: T, _free_ns: int) -> int:
        rec = await send(item, clock.now_ns())
        on_record(rec)
        return record_end(rec, clock)

    await _seated(ClosedSeats(items, concurrency, end_ns=end, stop=stop), clock, start, serve)


async def run_capped_loop(
    arrivals: Sequence[tuple[int, T]],
    send: Send[T],
    on_record: OnRecord,
    clock: LoopClock,
    *,
    cap: int,
    stop: Callable[[], bool] | None = None,
    end_ns: int | None = None,
) -> None:
    """An open loop's arrivals (run clock, in time order) with at most `cap` streams in
    flight: each arrival takes a seat in turn, waiting for one to free when all are taken
    (first come, first seated, as vllm bench serve's semaphore). The send is intended at the
    instant it gets its seat, so a wait for a seat is not the client's lateness nor part of
    TTFT; each record carries its own wait as `seat_wait_ns` (0 when a seat was free). No
    arrival takes a seat from `end_ns` on, nor once `stop` says so; those in flight finish."""

    async def serve(item: tuple[int, T], free_ns: int) -> int:
        arrival_ns, payload = item
        await clock.sleep_until(arrival_ns)
        start_ns = max(arrival_ns, free_ns)
        rec = await send(payload, start_ns)
        on_record(dataclasses.replace(rec, seat_wait_ns=start_ns - arrival_ns))
        return record_end(rec, clock)

    seats = ClosedSeats(arrivals, cap, end_ns=end_ns, stop=stop)
    await _seated(seats, clock, clock.now_ns(), serve)


async def _seated(
    seats: ClosedSeats[T],
    clock: LoopClock,
    now_ns: int,
    serve: Callable[[T, int], Awaitable[int]],
) -> None:
    """Each of `seats` serves its first item at `now_ns`, then its next as its last one ends,
    until `seats` gives it none: what a closed loop and a capped open loop share.
    `serve(item, free_ns)` does an item's work, told when its seat freed (0: a seat is free from
    the start, so a late first send is lateness, no wait), and returns when the work ended."""

    async def seat(item: T | None) -> None:
        free_ns = 0
        while item is not None:
            free_ns = await serve(item, free_ns)
            item = seats.take(free_ns)
            if item is not None:
                await clock.sleep_until(free_ns)

    async with clock.crew() as crew:
        for item in seats.first(now_ns):
            crew.create_task(seat(item))
