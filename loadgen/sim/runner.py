"""Runs the engine in real time on asyncio: each step's outputs are delivered when it ends.

One loop task. Idle, it waits on an asyncio.Event that submit() sets (no polling). Busy, it
computes a step (which advances engine time by the modelled duration), sleeps until that step's
absolute deadline `start_ns + (engine end - engine start) / speed`, then puts the outputs on
the request queues. Deadlines are absolute, so Python overhead never accumulates as drift; when
the loop falls behind, outputs go out late and the engine clock stays the reference.

Engine time and the clock: engine time `t` happens at `wall_ns(t)` on the perf_counter_ns
clock. With speed != 1 engine times are model seconds and wall time is compressed by `speed`:
anything that reports sim time must say which of the two it uses (ground truth is engine time).
A request's arrival_s is the engine time the caller says it arrived (the sim server: when it
received the request, before tokenizing it, as the virtual clock has it) or else the clock's
reading when it is submitted. An arrival in the (recent) past never changes a step already
computed: mid-step, the request joins the next step; idle, the next step starts at
max(end of the last step, arrival), and its outputs go out when that step's end is due (at once
if that is already past, the engine clock staying the reference).

The clock is injectable (loadgen/clock.py's `Clock`): `VirtualClock` runs the same loop with no
real sleeping (tests).
"""

from __future__ import annotations

import asyncio
import contextlib

from loadgen.clock import Clock, WallClock
from loadgen.sim.engine import Engine, SimRequest, TokenOutput


class VirtualClock:
    """A clock that jumps to every deadline at once; other tasks still run at each sleep."""

    def __init__(self, start_ns: int = 0) -> None:
        self._now_ns = start_ns

    def now_ns(self) -> int:
        return self._now_ns

    async def sleep_until(self, deadline_ns: int) -> None:
        self._now_ns = max(self._now_ns, deadline_ns)
        await asyncio.sleep(0)


class SimRunner:
    def __init__(self, engine: Engine, *, speed: float = 1.0, clock: Clock | None = None) -> None:
        if speed <= 0:
            raise ValueError(f"speed must be > 0, got {speed}")
        self.engine = engine
        self.speed = speed
        self._clock: Clock = clock or WallClock()
        self._queues: dict[str, asyncio.Queue[TokenOutput]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._start_ns = self._clock.now_ns()
        self._engine_t0 = engine.now_s

    async def start(self) -> None:
        if self._task is None:
            self._start_ns = self._clock.now_ns()
            self._engine_t0 = self.engine.now_s
            self._task = asyncio.create_task(self._loop(), name="sim-engine")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def submit(self, req: SimRequest, arrival_s: float | None = None) -> asyncio.Queue[TokenOutput]:
        """Queue a request that arrived at engine time `arrival_s` (not after now; default now);
        raises AdmissionRejected (or ValueError) from the engine."""
        now = self.engine_now_s()
        req.arrival_s = now if arrival_s is None else min(arrival_s, now)
        queue: asyncio.Queue[TokenOutput] = asyncio.Queue()
        self.engine.add_request(req)
        self._queues[req.request_id] = queue
        self._wake.set()
        return queue

    def abort(self, request_id: str) -> None:
        self._queues.pop(request_id, None)
        self.engine.abort_request(request_id)

    def wall_ns(self, engine_s: float) -> int:
        """The clock reading (perf_counter_ns by default) at which engine time `engine_s` is."""
        return self._start_ns + round((engine_s - self._engine_t0) / self.speed * 1e9)

    def engine_now_s(self) -> float:
        """The engine time the clock reads now."""
        return self._engine_t0 + (self._clock.now_ns() - self._start_ns) * self.speed / 1e9

    async def _loop(self) -> None:
        engine = self.engine
        while True:
            step = engine.step()
            if step is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            await self._clock.sleep_until(self.wall_ns(step.start_s + step.duration_s))
            for out in step.outputs:
                queue = self._queues.get(out.request_id)
                if queue is None:
                    continue
                queue.put_nowait(out)
                if out.finished:
                    del self._queues[out.request_id]
