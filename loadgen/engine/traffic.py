"""A rep's measured traffic on either clock: a closed loop of its requests, or one open loop of
its requests and its sessions' starts.

Both backends send a rep through `send_rep`: the HTTP backend on the wall clock with its
client, the virtual one on the sim's event time with the sim's submit. A session starts at its
offset like a plain group's stream (the plan staggers both alike), so sessions join the open
loop's schedule instead of running a schedule of their own; at one instant plain requests
start first, then sessions, in plan order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from loadgen.client.loops import (
    OnRecord,
    Send,
    recorded,
    run_capped_loop,
    run_closed_loop,
    run_open_loop,
)
from loadgen.clock import LoopClock
from loadgen.engine.sessions import BuiltSession, Conversation, converse
from loadgen.request import StreamRequest
from loadgen.scenario.plan import RepPlan

T = TypeVar("T")


async def send_rep(
    rep: RepPlan,
    requests: Sequence[T],
    sessions: Sequence[BuiltSession],
    send: Send[T | StreamRequest],
    on_record: OnRecord,
    clock: LoopClock,
    *,
    model: str,
    lead_ns: int,
    stop: Callable[[], bool] | None,
) -> None:
    """`requests` (rep.requests as the backend sends them, in plan order) and `sessions`' turns
    from now, each recorded, none started once `stop` says so. An open loop's offsets
    count from `lead_ns` ahead of now, so its first send is not late by the time it takes to
    start. Sessions come only with open loops (the plan starts them together or staggered),
    never with a capped one (poisson or gamma arrivals)."""
    if rep.concurrency is not None:
        await run_closed_loop(
            requests, send, on_record, clock, concurrency=rep.concurrency, stop=stop,
            duration_ns=rep.duration_ns,
        )  # fmt: skip
        return
    start_ns = clock.now_ns() + lead_ns
    plain = [(start_ns + (p.offset_ns or 0), r)
             for p, r in zip(rep.requests, requests, strict=True)]  # fmt: skip
    if rep.cap is not None:
        end = None if rep.duration_ns is None else start_ns + rep.duration_ns
        await run_capped_loop(plain, send, on_record, clock, cap=rep.cap, stop=stop, end_ns=end)
        return
    talks = [Conversation(s, model, start_ns) for s in sessions]
    send_one = recorded(send, on_record)

    async def begin(item: T | Conversation, t_ns: int) -> None:
        if isinstance(item, Conversation):
            await converse(item, send, on_record, clock)
        else:
            await send_one(item, t_ns)

    arrivals: list[tuple[int, T | Conversation]] = [*plain, *((c.start_ns, c) for c in talks)]
    await run_open_loop(arrivals, begin, clock, stop=stop)
