"""The client's own timing error: how late the event loop was when each stamp was taken.

Every timestamp the client takes is read when the loop gets round to a socket, so a loop busy
with other streams stamps an event late. A ticker notes how late each of its TICK_S ticks woke;
a stamp is charged the lag that touched it, not the worst lag anywhere while its stream was
open (charged the window's worst, the first stream of a quiet `loadgen request -n 3 -c 1` got
a 42 ms bound, a collection just before its send, against a 3 ms TTFT):
- the lag of the tick it was taken in, when it was taken inside that tick's lateness (between
  the tick's due time and its late wake: a stall that began after the stamp cannot delay it);
- after a tick that woke more than BEHIND_NS late, that lag plus the time since: a loop that
  is behind stays behind while it works through what piled up (256 streams on one loop had
  their reads stamped a batch late while each tick, serviced early in its batch, showed only
  part of that).
The ticks come from a timerfd in the loop's own poll set, so a tick waits for the loop exactly
as a socket does, to ~50 us on an idle loop; a sleep's millisecond timer overshot by 0.17 ms at
p50 and 0.9 ms at p99 on an idle loop (shared 2-core machine), and a stamp taken during that
overshoot looked late. Where there is no timerfd, the ticker sleeps.
Wake times and lags are kept in typed arrays (8 bytes a tick: an hour at 500 ticks/s is 14 MB),
searched with bisect for one stamp and numpy for a stream's every chunk.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
from array import array
from bisect import bisect_left
from time import perf_counter_ns

import numpy as np

TICK_S = 0.002
TICK_NS = int(TICK_S * 1e9)
# A tick this late says the loop was behind (an idle loop services its timerfd in ~50 us).
BEHIND_NS = 500_000


class LoopLagTicker:
    """Run `run()` as a task on the loop being measured; `lag_at()` / `lag_over()` per stamp."""

    __slots__ = ("_lags", "_wakes")

    def __init__(self) -> None:
        self._wakes = array("q")  # perf_counter_ns of each wake
        self._lags = array("q")  # how late that wake was, ns

    def add(self, wake_ns: int, lag_ns: int) -> None:
        self._wakes.append(wake_ns)
        self._lags.append(lag_ns)

    def lag_at(self, t_ns: int, now_ns: int | None = None, since_ns: int = 0) -> int:
        """The lag (ns) that touched a stamp taken at `t_ns` (see the module doc); a tick still
        asleep at `now_ns` counts with the lateness it has reached so far. Nothing can have
        waited from before `since_ns` (the stream's send): a late tick due before it is a stall
        the stream never saw (the collection just before a probe's first send), and no
        stamp is charged more than the time since."""
        wakes, lags = self._wakes, self._lags
        n = len(wakes)
        k = bisect_left(wakes, t_ns)
        if k < n:
            own = lags[k] if t_ns >= wakes[k] - lags[k] else 0
        else:
            now = perf_counter_ns() if now_ns is None else now_ns
            due = wakes[-1] + TICK_NS if wakes else now
            own = max(0, now - due) if t_ns >= due else 0
        if k and lags[k - 1] > BEHIND_NS and wakes[k - 1] - lags[k - 1] >= since_ns:
            own = max(own, lags[k - 1] + t_ns - wakes[k - 1])
        return min(own, t_ns - since_ns)

    def lag_over(self, stamps: list[int], now_ns: int | None = None, since_ns: int = 0) -> int:
        """The largest `lag_at` of any of `stamps` (sorted, perf_counter ns); 0 for none."""
        if not stamps:
            return 0
        n = len(self._wakes)
        if n == 0 or stamps[0] == stamps[-1]:
            # One stamp, or every chunk from one read (a short answer at a high rate): its
            # lag_at, 0.6 us, where numpy's fixed cost, 13 us, was 15% of the client's
            # instructions per 16-token request at the ceiling (bench/ceiling.py).
            return self.lag_at(stamps[-1], now_ns, since_ns)
        # Stamps after the last wake are in the tick still asleep: its lateness so far.
        last = stamps[-1]
        pending = self.lag_at(last, now_ns, since_ns) if last > self._wakes[-1] else 0
        wakes = np.frombuffer(self._wakes, dtype=np.int64)
        lags = np.frombuffer(self._lags, dtype=np.int64)
        ts = np.asarray(stamps, dtype=np.int64)
        k = np.searchsorted(wakes, ts, side="left")
        at = np.minimum(k, n - 1)
        own = np.where((k < n) & (ts >= wakes[at] - lags[at]), lags[at], 0)
        prev = np.maximum(k - 1, 0)
        behind = (k > 0) & (lags[prev] > BEHIND_NS) & (wakes[prev] - lags[prev] >= since_ns)
        carry = np.where(behind, lags[prev] + ts - wakes[prev], 0)
        charged = np.minimum(np.maximum(own, carry), ts - since_ns)
        return max(int(charged.max()), pending)

    async def run(self) -> None:
        timer = _timerfd(TICK_NS)
        if timer is not None:
            try:
                await self._run_timerfd(*timer)
            finally:
                os.close(timer[0])
        period_ns = TICK_NS
        add = self.add
        while True:
            before = perf_counter_ns()
            await asyncio.sleep(TICK_S)
            now = perf_counter_ns()
            add(now, max(0, now - before - period_ns))

    async def _run_timerfd(self, fd: int, first_due: int) -> None:
        """Ticks from a periodic timerfd in the loop's own poll set: it wakes the loop the way a
        socket does (its lag is a socket read's delay) and to the microsecond, where a sleep's
        millisecond timer overshot by up to 1 ms on an idle loop and charged that to stamps."""
        loop = asyncio.get_running_loop()
        add, read = self.add, os.read
        due = [first_due]

        def tick() -> None:
            now = perf_counter_ns()
            try:
                n = int.from_bytes(read(fd, 8), "little")
            except BlockingIOError:
                return
            add(now, max(0, now - due[0]))
            due[0] += n * TICK_NS

        loop.add_reader(fd, tick)
        try:
            await loop.create_future()
        finally:
            loop.remove_reader(fd)


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
