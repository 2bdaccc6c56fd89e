"""The executor against a fake backend: schedules, no coordinated omission, closed-loop limits."""

import asyncio
import dataclasses
import time

from loadgen.client.loops import (
    ClosedSeats,
    recorded,
    run_capped_loop,
    run_closed_loop,
    run_open_loop,
    stream_at,
)
from loadgen.clock import WallClock
from loadgen.records import StreamRecord
from loadgen.request import StreamRequest, intended_at

MS = 1_000_000


class SlowBackend:
    """Answers every request after `delay_s`, logging send and completion order."""

    def __init__(self, run_start_ns: int, delay_s: float) -> None:
        self.run_start_ns = run_start_ns
        self.delay_s = delay_s
        self.events: list[tuple[str, str]] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def stream(self, req: StreamRequest) -> StreamRecord:
        sent = time.perf_counter_ns() - self.run_start_ns
        self.events.append(("send", req.id))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        await asyncio.sleep(self.delay_s)
        self.in_flight -= 1
        self.events.append(("done", req.id))
        done = time.perf_counter_ns() - self.run_start_ns
        return StreamRecord(
            id=req.id, group=req.group, rep=req.rep, status="ok", error=None, api=req.api,
            model=req.model, prompt_tokens=None, requested_prompt_tokens=None,
            completion_tokens=1, cached_tokens=None, chunks=1, events=1, bytes=1,
            token_source="usage_final", finish_reason="length", http_status=200,
            t_intended_ns=req.t_intended_ns, t_sent_ns=sent, t_headers_ns=sent,
            t_first_ns=done, t_last_ns=done, t_done_ns=done,
        )  # fmt: skip


def requests(n: int, gap_ms: int) -> list[StreamRequest]:
    return [
        StreamRequest(
            id=f"r{i}", model="m", prompt="p", max_tokens=1, t_intended_ns=i * gap_ms * MS
        )
        for i in range(n)
    ]


async def test_open_loop_sends_do_not_wait_for_responses():
    start = time.perf_counter_ns()
    backend = SlowBackend(start, delay_s=0.3)
    records: list[StreamRecord] = []
    arrivals = [(r.t_intended_ns, r) for r in requests(5, 10)]
    await run_open_loop(arrivals, recorded(stream_at(backend), records.append), WallClock(start))
    sends = [e for e in backend.events[:5]]
    # Every send happens before the first response: arrivals never wait on the server.
    assert sends == [("send", f"r{i}") for i in range(5)]
    assert backend.max_in_flight == 5
    assert sorted(r.id for r in records) == [f"r{i}" for i in range(5)]
    # Intended times are kept as planned; lateness is visible as t_sent - t_intended >= 0.
    assert [r.t_intended_ns for r in sorted(records, key=lambda r: r.id)] == [
        i * 10 * MS for i in range(5)
    ]
    assert all(r.t_sent_ns >= r.t_intended_ns for r in records)


async def test_closed_loop_caps_in_flight_and_stamps_pickup_as_intended():
    start = time.perf_counter_ns()
    backend = SlowBackend(start, delay_s=0.02)
    records: list[StreamRecord] = []
    await run_closed_loop(
        requests(6, 0), stream_at(backend), records.append, WallClock(start), concurrency=2
    )
    assert backend.max_in_flight == 2
    assert len(records) == 6
    later = sorted(records, key=lambda r: r.t_intended_ns)[-1]
    assert later.t_intended_ns > 0  # picked up after earlier ones finished, not at t=0


def test_closed_seats_fill_then_take_one_per_free_seat_until_the_end_or_a_stop() -> None:
    seats = ClosedSeats(["a", "b", "c", "d", "e"], 2, end_ns=10)
    assert seats.first(0) == ["a", "b"]
    assert seats.take(9) == "c"
    assert seats.take(10) is None  # the duration is over: the seat stays empty
    stopped = [False]
    seats = ClosedSeats(["a", "b", "c"], 5, stop=lambda: stopped[0])
    assert seats.first(0) == ["a", "b", "c"]  # never more seats than items
    assert seats.take(1) is None
    seats = ClosedSeats(["a", "b"], 1, stop=lambda: stopped[0])
    assert seats.first(0) == ["a"]
    stopped[0] = True
    assert seats.take(1) is None


def test_a_closed_loop_sends_nothing_after_its_duration() -> None:
    async def go() -> SlowBackend:
        start = time.perf_counter_ns()
        backend = SlowBackend(start, delay_s=0.05)
        reqs = [StreamRequest(id=f"r{i}", model="m", prompt="p", max_tokens=1) for i in range(400)]
        await run_closed_loop(reqs, stream_at(backend), lambda r: None, WallClock(start),
                              concurrency=2, duration_ns=300 * MS)  # fmt: skip
        return backend

    backend = asyncio.run(go())
    sends = sum(kind == "send" for kind, _ in backend.events)
    # 2 seats of 50 ms requests over 300 ms: about 12 sends, far from the 400 planned (a
    # loaded machine's slower sleeps can only make it fewer).
    assert 2 <= sends <= 14


async def test_a_capped_open_loop_holds_its_seats_on_the_wall_clock():
    start = time.perf_counter_ns()
    backend = SlowBackend(start, delay_s=0.05)
    records: list[StreamRecord] = []
    # Six arrivals 5 ms apart, three seats of 50 ms streams: the last three wait for a seat.
    arrivals = [(r.t_intended_ns, r) for r in requests(6, 5)]
    await run_capped_loop(arrivals, stream_at(backend), records.append, WallClock(start), cap=3)
    assert backend.max_in_flight == 3 and len(records) == 6
    by_id = {r.id: r for r in records}
    assert [by_id[f"r{i}"].seat_wait_ns for i in range(3)] == [0, 0, 0]
    for i in range(3, 6):
        r = by_id[f"r{i}"]
        # Seated when an earlier stream ended (>= 50 ms after the first arrival), the send
        # intended at that instant, the wait its distance from the arrival.
        assert r.seat_wait_ns is not None and r.seat_wait_ns > 0
        assert r.t_intended_ns == i * 5 * MS + r.seat_wait_ns >= 50 * MS


def test_a_request_is_stamped_with_its_intended_instant_as_replace_stamps_it() -> None:
    # Every field away from its default, so a field out of place in the positional copy shows.
    req = StreamRequest(
        id="r", model="m", prompt="p", max_tokens=3, api="chat", group="g", rep=2,
        t_intended_ns=7, min_tokens=1, ignore_eos=True, cache_salt="s",
        requested_prompt_tokens=5, prompt_tokens_sent=6, chat_template_kwargs={"k": 1},
        phase="warmup", arm="a", messages=({"role": "user", "content": "c"},), session="s1",
        turn=1, keep_text=True, cold=True, needle="n", tool_result=True,
        extra_body={"seed": 1}, traceparent="00-" + "1" * 32 + "-" + "2" * 16 + "-01",
    )  # fmt: skip
    assert intended_at(req, 99) == dataclasses.replace(req, t_intended_ns=99)
    assert intended_at(req, 99).t_intended_ns == 99 and req.t_intended_ns == 7
