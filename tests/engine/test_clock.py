"""The run clocks: VirtualTime's order of events, its crews and pending results; the wall's."""

import asyncio
import time
from typing import Any

import pytest

from loadgen.client.loops import run_closed_loop, run_open_loop
from loadgen.clock import Pending, VirtualTime, WallClock
from loadgen.records import StreamRecord


class Driver:
    """The smallest driver: nothing of its own happens, so it only takes timers in order."""

    def __init__(self) -> None:
        self.now = 0
        self.time = VirtualTime(lambda: self.now)

    def run(self, work: Any) -> Any:
        root = self.time.start(work)
        self.time.run_ready()
        while (t := self.time.next_timer_ns()) is not None:
            self.now = t
            self.time.wake_next()
            self.time.run_ready()
        assert root.done
        return root.result


def test_timers_of_one_instant_fire_in_the_order_they_were_set() -> None:
    d = Driver()
    seen: list[tuple[int, str]] = []

    async def at(t: int, name: str) -> None:
        await d.time.sleep_until(t)
        seen.append((d.now, name))

    async def main() -> None:
        async with d.time.crew() as crew:
            for t, name in [(20, "a"), (10, "b"), (20, "c"), (0, "now"), (10, "d")]:
                crew.create_task(at(t, name))

    d.run(main())
    assert seen == [(0, "now"), (10, "b"), (10, "d"), (20, "a"), (20, "c")]


def test_a_turn_taken_now_waits_behind_the_sleepers_woken_before_it() -> None:
    d = Driver()
    seen: list[str] = []

    async def sleeper(name: str) -> None:
        await d.time.sleep_until(5)
        seen.append(name)
        await d.time.take_turn()
        seen.append(name + " sends")

    async def main() -> None:
        async with d.time.crew() as crew:
            crew.create_task(sleeper("x"))
            crew.create_task(sleeper("y"))

    d.run(main())
    # Each wakes, then queues its send behind the other's wake-up: both wake before either
    # sends, as two requests due at one instant both arrive before the sim steps.
    assert seen == ["x", "y", "x sends", "y sends"]


def test_a_crew_waits_for_its_tasks_and_the_root_keeps_its_result() -> None:
    d = Driver()

    async def main() -> str:
        done: list[int] = []

        async def job(t: int) -> None:
            await d.time.sleep_until(t)
            done.append(t)

        async with d.time.crew() as crew:
            for t in (30, 10):
                crew.create_task(job(t))
        return f"{done} at {d.now}"

    assert d.run(main()) == "[10, 30] at 30"


def test_a_pending_result_parks_until_set_and_a_set_one_returns_at_once() -> None:
    d = Driver()
    later: Pending[str] = d.time.pending()
    ready: Pending[str] = d.time.pending()
    ready.set("early")

    async def setter() -> None:
        await d.time.sleep_until(7)
        later.set("late")

    async def main() -> list[Any]:
        async with d.time.crew() as crew:
            crew.create_task(setter())
            got = [await ready, d.now, await later, d.now]
        return got

    assert d.run(main()) == ["early", 0, "late", 7]


def test_the_same_closed_loop_runs_on_virtual_time_exactly() -> None:
    d = Driver()
    sends: list[tuple[int, str]] = []

    async def send(item: str, intended: int) -> Any:
        await d.time.take_turn()
        sends.append((intended, item))
        done = d.time.pending()
        done.set(_record(item, t_done=intended + 100))  # answered 100 ns after it is sent
        return await done

    records: list[Any] = []
    d.run(run_closed_loop(list("abcde"), send, records.append, d.time, concurrency=2))
    assert sends == [(0, "a"), (0, "b"), (100, "c"), (100, "d"), (200, "e")]
    assert [r.id for r in records] == list("abcde")


def test_an_open_loop_on_virtual_time_starts_each_item_at_its_instant() -> None:
    d = Driver()
    started: list[tuple[int, int, str]] = []

    async def start(item: str, t: int) -> None:
        started.append((d.now, t, item))

    d.run(run_open_loop([(50, "late"), (0, "first"), (50, "later")], start, d.time))
    assert started == [(0, 0, "first"), (50, 50, "late"), (50, 50, "later")]


def test_awaiting_anything_but_the_clock_on_virtual_time_is_refused() -> None:
    d = Driver()

    async def main() -> None:
        await asyncio.sleep(0)

    with pytest.raises(TypeError, match="not the clock"):
        d.run(main())


def test_closing_virtual_time_runs_the_parked_coroutines_finally() -> None:
    d = Driver()
    closed: list[str] = []

    async def parked() -> None:
        try:
            await d.time.sleep_until(10)
        finally:
            closed.append("parked")

    d.time.start(parked())
    d.time.run_ready()
    d.time.close()  # a stopped run: nothing will wake it
    assert closed == ["parked"] and d.time.next_timer_ns() is None


def test_the_wall_clock_reads_and_sleeps_from_its_origin() -> None:
    async def go() -> tuple[int, float]:
        clock = WallClock(time.perf_counter_ns())
        await clock.sleep_until(-1_000_000_000)  # in the past: at once
        before = time.perf_counter()
        await clock.sleep_until(clock.now_ns() + 20_000_000)
        return clock.now_ns(), time.perf_counter() - before

    now, slept = asyncio.run(go())
    assert now >= 20_000_000 and slept >= 0.019


def _record(rid: str, *, t_done: int) -> StreamRecord:
    return StreamRecord(
        id=rid, group="g", rep=0, status="ok", error=None, api="completions", model="m",
        prompt_tokens=None, requested_prompt_tokens=None, completion_tokens=1,
        cached_tokens=None, chunks=1, events=1, bytes=0, token_source="usage_final",
        finish_reason="length", http_status=200, t_intended_ns=0, t_sent_ns=0,
        t_headers_ns=0, t_first_ns=t_done, t_last_ns=t_done, t_done_ns=t_done,
    )  # fmt: skip
