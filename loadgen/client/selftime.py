"""The client's own timing error: how long a read the client stamped may have waited for its
event loop.

Every timestamp the client takes is read when the loop gets round to a socket, so a loop busy
with other streams stamps an event late. A ticker is a timerfd in the loop's own poll set, due
every TICK_NS: it wakes the loop the way a socket does, so its ticks say when the loop polled.
The bound for a stamp at t follows from two facts of one poll-and-run pass: a socket that was
ready when the loop polled is run in that pass, and a tick runs at most once a pass. Let j be
the last tick run before t and i the one before it: i ran in an earlier pass than t's read, and
that pass polled after i was due, so the data t read arrived after i's due time and waited at
most t - due(i). Two ticks back, not one: a pass can run tick j early and the read late, with
the data already waiting at its poll (a 32 ms pass: tick j on time, the read 30 ms late).
The old rule charged a stamp the lag of the 2 ms tick whose lateness it was taken in: a stall
between two ticks' due times went unseen. Against firehose (bench/ceiling.py, one worker, 8 in
flight, 16-token answers) it flagged 123 of the 1,017 streams whose first token it stamped
more than their 1 ms tolerance after firehose wrote it; this bound flags all of them, and
flags 15.0% of streams where 12.8% were that late (its median excess: 0.04 ms).
On an idle loop the bound is one to two ticks (0.35 to 0.6 ms), so TICK_NS is small enough
that the 1 ms floor of tolerance (analysis/selferror.py) stays clear of it. The price: 4,000
wakes a second cost one saturated worker 3-8% of its requests/s at 16-token answers and 0-5%
at 256 against 2 ms ticks (bench/ceiling.py ladders at C=8..32 back to back, 2-core VM); the
old rule's ladders left up to half the streams stamped late and unflagged (50.3% at
T=16, C=32), this none.
A tick run within QUIET_NS of its due time is on time and not stored: the ticks between two
stored ones are on a grid of TICK_NS, so an idle loop keeps nothing and a busy one 24 bytes a
late tick, until the client forgets those older than its oldest open stream. Where there is
no timerfd the ticker sleeps, and every wake is stored; a sleep wakes on uvloop's millisecond
timer, so the bound there is coarser and short TTFTs read client_limited sooner.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import weakref
from array import array
from bisect import bisect_left
from time import perf_counter_ns

import numpy as np

TICK_NS = 250_000
# A tick run this soon after its due time is on time (an idle loop runs its timerfd's tick in
# ~50 us); an on-time tick due at most this long before a stamp has run before it.
QUIET_NS = 100_000
# Up to this many reads a record's lag_over charges them one by one, beyond it with numpy.
SCALAR_READS = 32


class LoopLagTicker:
    """Run `run()` as a task on the loop being measured; `lag_at()` / `lag_over()` per stamp."""

    __slots__ = ("_dues", "_nexts", "_origin", "_pending", "_quiet_ns", "_wakes", "period_ns")

    def __init__(self, period_ns: int = TICK_NS) -> None:
        self.period_ns = period_ns
        self._wakes = array("q")  # perf_counter_ns when each stored tick ran
        self._dues = array("q")  # when it was due (the first due time a late read covered)
        self._nexts = array("q")  # when the tick after it was due
        self._origin: int | None = None  # the first tick's due time; None until started
        self._pending = 0  # the due time of the tick not yet run
        self._quiet_ns = QUIET_NS

    def start(self, first_due_ns: int, *, periodic: bool = True) -> None:
        """Ticks from now on are due from `first_due_ns`, every period_ns when `periodic` (a
        timerfd); else each wake names the next due time and is stored."""
        self._origin = self._pending = first_due_ns
        self._quiet_ns = QUIET_NS if periodic else -1

    def tick(self, wake_ns: int, due_ns: int, next_due_ns: int) -> None:
        """The tick due at `due_ns` ran at `wake_ns`; the next one is due at `next_due_ns`."""
        if wake_ns - due_ns > self._quiet_ns:
            self._wakes.append(wake_ns)
            self._dues.append(due_ns)
            self._nexts.append(next_due_ns)
        self._pending = next_due_ns

    def forget_before(self, boundary_ns: int) -> None:
        """Drops the stored ticks run before `boundary_ns`, with no change to any bound of a
        stamp sent after it (the grid then starts where they left it): no stream still open
        was sent before it. A saturated loop stores nearly every tick, 350 MB an hour kept."""
        k = bisect_left(self._wakes, boundary_ns)
        if k:
            self._origin = self._nexts[k - 1]
            for stored in (self._wakes, self._dues, self._nexts):
                del stored[:k]

    def lag_at(self, t_ns: int, since_ns: int = 0) -> int:
        """How long (ns) a read stamped at `t_ns` may have waited for the loop (the module
        doc's bound); nothing the stream read arrived before `since_ns` (its send)."""
        origin = self._origin
        if origin is None:
            return max(0, t_ns - since_ns)
        p, wakes, dues, nexts = self.period_ns, self._wakes, self._dues, self._nexts
        i = bisect_left(wakes, t_ns) - 1  # the last stored tick run before t
        start = nexts[i] if i >= 0 else origin  # on-time ticks: due in [start, end)
        end = dues[i + 1] if i + 1 < len(wakes) else self._pending
        last = min(t_ns - self._quiet_ns, end - 1)
        if last >= start:  # j is on time
            due_j = start + (last - start) // p * p
            prev = due_j - p if due_j > start else (dues[i] if i >= 0 else since_ns)
        elif i < 0:  # no tick ran before t
            prev = since_ns
        else:  # j is stored tick i
            before = nexts[i - 1] if i >= 1 else origin
            prev = dues[i] - p if dues[i] > before else (dues[i - 1] if i >= 1 else since_ns)
        return max(0, t_ns - max(prev, since_ns))

    def stall_at(self, t_ns: int) -> int:
        """How long (ns) the loop stayed stalled after `t_ns`: what was left of a late tick's
        wait when the stamp was taken inside it. A send stamped there is written no sooner
        than the stall's end (aiohttp's path, where a wait sits between stamp and write)."""
        k = bisect_left(self._wakes, t_ns)
        if k == len(self._wakes) or self._dues[k] > t_ns:
            return 0
        return self._wakes[k] - t_ns

    def lag_over(self, stamps: list[int], since_ns: int = 0) -> int:
        """The largest `lag_at` of any of `stamps` (sorted, perf_counter ns); 0 for none."""
        if not stamps:
            return 0
        reads = list(dict.fromkeys(stamps))  # every chunk of one read shares its stamp
        if len(reads) <= SCALAR_READS or self._origin is None or not self._wakes:
            # lag_at is ~1 us a read, numpy's 20-odd array operations ~35 us a record: a
            # 16-token answer comes in one to three reads at the ceiling (bench/ceiling.py),
            # and a loop that stored no late tick is idle enough to take them one by one.
            return max(self.lag_at(t, since_ns) for t in reads)
        p, origin, n = self.period_ns, self._origin, len(self._wakes)
        ts = np.asarray(reads, dtype=np.int64)
        # Views, never copies: the stored ticks grow with the run, a record stays O(log n).
        wakes = np.frombuffer(self._wakes, dtype=np.int64)
        dues = np.frombuffer(self._dues, dtype=np.int64)
        nexts = np.frombuffer(self._nexts, dtype=np.int64)
        i = np.searchsorted(wakes, ts, side="left") - 1
        at, after, back = (np.clip(i + d, 0, n - 1) for d in (0, 1, -1))
        start = np.where(i >= 0, nexts[at], origin)
        end = np.where(i + 1 < n, dues[after], self._pending)
        stored_due = np.where(i >= 0, dues[at], since_ns)
        before = np.where(i >= 1, nexts[back], origin)
        prev_off = np.where(stored_due > before, stored_due - p,
                            np.where(i >= 1, dues[back], since_ns))  # fmt: skip
        last = np.minimum(ts - self._quiet_ns, end - 1)
        due_j = start + (np.maximum(last, start) - start) // p * p
        prev_on = np.where(due_j > start, due_j - p, stored_due)
        prev = np.where(last >= start, prev_on, np.where(i >= 0, prev_off, since_ns))
        return int(np.maximum(ts - np.maximum(prev, since_ns), 0).max())

    async def run(self) -> None:
        timer = _timerfd(self.period_ns)
        if timer is not None:
            try:
                await self._run_timerfd(*timer)
            finally:
                os.close(timer[0])
        period_s = self.period_ns / 1e9
        self.start(perf_counter_ns() + self.period_ns, periodic=False)
        while True:
            await asyncio.sleep(period_s)
            now = perf_counter_ns()
            self.tick(now, self._pending, now + self.period_ns)

    async def _run_timerfd(self, fd: int, first_due: int) -> None:
        """Ticks from a periodic timerfd in the loop's own poll set: it wakes the loop the way a
        socket does (its lag is a socket read's delay) and to the microsecond, where a sleep's
        millisecond timer overshot by up to 1 ms on an idle loop."""
        loop = asyncio.get_running_loop()
        tick, read, p = self.tick, os.read, self.period_ns
        self.start(first_due)

        def on_tick() -> None:
            try:
                n = int.from_bytes(read(fd, 8), "little")
            except BlockingIOError:
                return
            # Stamped after the read: every expiration it counted was due by then.
            now = perf_counter_ns()
            due = self._pending
            tick(now, due, due + n * p)

        loop.add_reader(fd, on_tick)
        try:
            await loop.create_future()
        finally:
            loop.remove_reader(fd)


class LoopTicks:
    """The one ticker of an event loop, shared by every client streaming on it (a worker's
    client per replica): the bound is the loop's, and each ticker more woke the loop 4,000
    times a second more. On the 2-core build machine, 3 tickers beside one client's closed
    loop (C=8, 16-token answers) cost 10-15 us of its 83 a request; one worker streaming to 4
    replicas went from 112-117 us a request to 106-112 (bench/ceiling.py, 3 pairs). Its task
    runs from any client's first stream until the last client leaves; a stored tick is
    forgotten only once it is older than every client's oldest open stream."""

    def __init__(self) -> None:
        self.lag = LoopLagTicker()
        self._task: asyncio.Task | None = None
        # Per client (by id), the send of its oldest open stream at its last look; its join
        # until then.
        self._horizons: dict[int, int] = {}

    @classmethod
    def join(cls, user: object) -> LoopTicks:
        """The running loop's ticks, `user` counted among their clients until it leaves."""
        loop = asyncio.get_running_loop()
        ticks = _LOOP_TICKS.get(loop)
        if ticks is None:
            ticks = _LOOP_TICKS[loop] = cls()
        ticks._horizons[id(user)] = perf_counter_ns()
        return ticks

    async def leave(self, user: object) -> None:
        """`user` streams no more: the last client to leave stops the ticks."""
        self._horizons.pop(id(user), None)
        if self._horizons:
            return
        loop = asyncio.get_running_loop()
        if _LOOP_TICKS.get(loop) is self:
            del _LOOP_TICKS[loop]
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def start(self) -> None:
        """Starts the ticks, unless they run already."""
        if self._task is None:
            self._task = asyncio.create_task(self.lag.run(), name="loadgen-client-lag")

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def forget_before(self, user: object, boundary_ns: int) -> None:
        """`user` has no open stream sent before `boundary_ns`: the ticks stored before every
        client's boundary are dropped."""
        self._horizons[id(user)] = boundary_ns
        self.lag.forget_before(min(self._horizons.values()))


_LOOP_TICKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopTicks] = (
    weakref.WeakKeyDictionary()
)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


_CLOCK_MONOTONIC, _TFD_NONBLOCK_CLOEXEC, _TFD_TIMER_ABSTIME = 1, 0o4000 | 0o2000000, 1


def _timerfd(period_ns: int) -> tuple[int, int] | None:
    """A non-blocking periodic timerfd on CLOCK_MONOTONIC (perf_counter_ns's clock on Linux),
    and when it is first due (one period from now); None off Linux or where libc refuses."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK_CLOEXEC)
    except (OSError, AttributeError):
        return None
    if fd < 0:
        return None
    first = perf_counter_ns() + period_ns
    spec = _Itimerspec(
        _Timespec(0, period_ns), _Timespec(first // 1_000_000_000, first % 1_000_000_000)
    )
    if libc.timerfd_settime(fd, _TFD_TIMER_ABSTIME, ctypes.byref(spec), None) != 0:
        os.close(fd)
        return None
    return fd, first
