"""How busy the client's host was while streams were timed, and how much of it was loadgen.

A stream's own stamps see loadgen's delays (its loop's lag, its late sends) but not a core
the host had none of: with a server on the same host, a send the server stamped waits for a
core, and so does the kernel's delivery of it, before any client stamp can see the bytes. On
a 16-core host of the H100 kind, 15 client workers beside 4 firehose processes kept the cores
94-96% busy, the loopback connections' smoothed RTT went to 680-860 us at the median (19 us
with 10 workers), and 1-24 streams a point came past their tolerance with no stamp of theirs
late; on a slower host of the kind 12 workers kept it 88-89% busy and missed 2-21; at 63-84%
busy none was missed. The busy share is read from the kernel's own counters over the timed
traffic (run.json's client.host_cpu); analysis/selferror.py judges it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def host_busy_s() -> float | None:
    """CPU seconds every core spent busy since boot (/proc/stat's first line: all but idle
    and iowait; guest time is inside user time already); None without /proc."""
    try:
        head = Path("/proc/stat").read_text().split("\n", 1)[0]
    except OSError:
        return None
    f = [int(x) for x in head.split()[1:9]]
    return (sum(f) - f[3] - f[4]) * TICK_S


def cpu_ticks(pid: int) -> int:
    """utime + stime of a process, all its threads, clock ticks."""
    return stat_ticks(Path(f"/proc/{pid}/stat"))


def stat_ticks(stat: Path) -> int:
    """utime + stime (fields 14, 15) of a /proc stat file, clock ticks: /proc/PID/stat's are
    the whole process's, as are /proc/TID/stat's; a thread's own are under /proc/PID/task/."""
    fields = stat.read_text().rpartition(")")[2].split()
    return int(fields[11]) + int(fields[12])


def live_ticks(pid: int) -> int:
    """cpu_ticks of a process that may have gone (0 then)."""
    try:
        return cpu_ticks(pid)
    except OSError:
        return 0


class HostLoad:
    """The host's busy cores and the client's own (`pids`: this process and its workers, as
    they are when asked) inside `measuring()`, summed over every timed stretch."""

    def __init__(self, pids: Callable[[], Sequence[int]]) -> None:
        self._pids = pids
        self._span_s = 0.0
        self._host_s = 0.0
        self._client_s = 0.0

    @contextmanager
    def measuring(self) -> Iterator[None]:
        own0 = {pid: live_ticks(pid) for pid in self._pids()}
        t0, host0 = time.perf_counter(), host_busy_s()
        try:
            yield
        finally:
            host1 = host_busy_s()
            if host0 is not None and host1 is not None:
                self._span_s += time.perf_counter() - t0
                self._host_s += host1 - host0
                # A worker gone meanwhile reads 0: its ticks are lost, never negative.
                own = sum(max(0, live_ticks(pid) - ticks) for pid, ticks in own0.items())
                self._client_s += own * TICK_S

    def summary(self) -> dict[str, float]:
        """run.json's client.host_cpu: cores busy on average over the timed span, the host's
        and loadgen's own, and the host's cores; empty where nothing was measured."""
        if self._span_s <= 0:
            return {}
        return {
            "span_s": round(self._span_s, 3),
            "host_busy_cores": round(self._host_s / self._span_s, 2),
            "client_cores": round(self._client_s / self._span_s, 2),
            "cores": os.cpu_count() or 1,
        }
