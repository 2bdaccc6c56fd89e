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

Where the server runs on this host (a loopback target's listening process and those below
it), the kernel also counts how long it waited, runnable, for a core (schedstat): its witness
of the stamp-to-send time no client sees. Every stream that came late unflagged on a 16-core
host (10 of 10) and on the build machine (2 of 2) had its server waiting for a core longer
than the stream's overshoot in the 20-40 ms around it (bench/ceiling.md). So the client
reads its server's wait at each stream's send and first token (ServerWait), and each stream is
judged by its own server's wait in between (analysis/selferror.py's stream_server_waits).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

TICK_S = 1 / os.sysconf("SC_CLK_TCK")
# The names a target's URL gives this host's loopback by: a server there shares its cores.
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


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


def run_delay_ns(pid: int) -> int:
    """How long a process's live threads have waited, runnable, for a core (the kernel's
    count: the second field of each /proc/PID/task/TID/schedstat, ns; /proc/PID/schedstat
    is its first thread's alone); 0 where the kernel keeps none or the process has gone."""
    return sum(map(_waited_ns, Path(f"/proc/{pid}/task").glob("*/schedstat")))


class ServerWait:
    """How long a server's processes on this host (`pids`: the one listening on its port and
    those below it) have waited, runnable, for a core, their main threads summed (the second
    field of /proc/PID/schedstat, ns): read by the client at a stream's send and at its first
    token, the server's wait in between is the stream's own. A main thread, one read a
    process, where the sum over its threads (run_delay_ns) costs one a thread: it is the one
    that takes the requests and writes the answers (firehose's only thread; vLLM's API
    server's event loop and its engine core's busy loop). Each file is opened once and read
    in place (10 us opened afresh): 0.9 us a read of one process in a loop on the build
    machine, about 4 us of CPU inside a worker at its ceiling there (its caches cold), two a
    stream: some 5% of a worker's CPU a request at 16-token answers. A read kept from an
    earlier stream cannot stand in for a send's: at that ceiling a replica's client sends
    every 430 us, and a read that old would charge the stream its server's wait before it.
    A process gone (or never found) counts 0 from then on."""

    def __init__(self, pids: Sequence[int]) -> None:
        self._fds = [fd for pid in pids if (fd := _opened(f"/proc/{pid}/schedstat")) is not None]

    def __call__(self) -> int:
        return sum(map(_read_waited_ns, self._fds))

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds = []


def _opened(path: str) -> int | None:
    try:
        return os.open(path, os.O_RDONLY)
    except OSError:
        return None


def _read_waited_ns(fd: int) -> int:
    """The wait for a core of an opened schedstat file (read from its start)."""
    try:
        return _wait_field(os.pread(fd, 256, 0))
    except OSError:  # its process has gone
        return 0


def _waited_ns(schedstat: Path) -> int:
    """A schedstat file's wait for a core (its second field, ns); 0 for a thread or process
    gone, or a kernel that keeps none."""
    try:
        return _wait_field(schedstat.read_bytes())
    except OSError:
        return 0


def _wait_field(schedstat: bytes) -> int:
    try:
        return int(schedstat.split()[1])
    except (IndexError, ValueError):
        return 0


def processes() -> dict[int, tuple[int, int]]:
    """Every live process: its parent's pid and its utime + stime (ticks)."""
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:  # gone between the listing and the read
            continue
        out[int(stat.parent.name)] = int(fields[1]), int(fields[11]) + int(fields[12])
    return out


def with_descendants(
    pids: Collection[int], children: Mapping[int, Sequence[int]] | None = None
) -> list[int]:
    """`pids` and every live process below them (a server's engine processes are its
    children; a Ray node's actors its raylet's); `children`: process_children's map, where
    the caller took one for several lookups."""
    tree = process_children() if children is None else children
    out, todo = set(pids), list(pids)
    while todo:
        for child in tree.get(todo.pop(), ()):
            if child not in out:
                out.add(child)
                todo.append(child)
    return sorted(out)


def process_children() -> dict[int, list[int]]:
    """Every live process's children, by its pid."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in processes().items():
        children.setdefault(ppid, []).append(pid)
    return children


_LISTEN = "0A"  # a socket's state in /proc/net/tcp: TCP_LISTEN


def listening_pids(ports: Collection[int]) -> dict[int, list[int]]:
    """By port, the processes holding a listening TCP socket on it (this host's, v4 or v6)
    among `ports` that this user may look into, from one look at the sockets and one at
    every process's descriptors whatever the number of ports; {} without /proc."""
    port_of = {}  # a listening socket's descriptor link -> its port
    for table in ("tcp", "tcp6"):
        try:
            rows = Path(f"/proc/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if (
                len(f) > 9
                and f[3] == _LISTEN
                and (port := int(f[1].rpartition(":")[2], 16)) in ports
            ):
                port_of[f"socket:[{f[9]}]"] = port
    out: dict[int, list[int]] = {}
    if not port_of:
        return out
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        for port in {port_of[link] for link in _links(fd_dir) if link in port_of}:
            out.setdefault(port, []).append(int(fd_dir.parent.name))
    return out


def _links(fd_dir: Path) -> Iterator[str]:
    """What each open descriptor of a process's fd folder names; none of another user's
    process, nor of a descriptor closed between the listing and the read."""
    try:
        fds = list(fd_dir.iterdir())
    except OSError:
        return
    for fd in fds:
        try:
            yield os.readlink(fd)
        except OSError:
            continue


def local_servers(hosts_ports: Sequence[tuple[str | None, int | None]]) -> list[list[int]]:
    """Per entry of `hosts_ports` (a target's host and port each), the processes of its
    server where this host runs it: those listening on a loopback target's port, and their
    descendants; none of them this process (the wall-clock sim serves from inside loadgen).
    One look at /proc for them all: a run over 64 replicas asks for 64."""
    ports = {port for host, port in hosts_ports if port is not None and host in LOOPBACK}
    by_port = listening_pids(ports) if ports else {}
    if not by_port:
        return [[] for _ in hosts_ports]
    own, tree = os.getpid(), process_children()
    return [with_descendants(set(by_port.get(port, ())) - {own}, tree)
            if host in LOOPBACK and port is not None else []
            for host, port in hosts_ports]  # fmt: skip


class HostLoad:
    """The host's busy cores and the client's own (`pids`: this process and its workers, as
    they are when asked) inside `measuring()`, summed over every timed stretch; and, where
    the server runs here (`server_pids`: its processes, none of them loadgen's), how long its
    threads waited for a core: a server that lost its core between stamping an answer and
    sending it delays that stream's TTFT where no client stamp sees it, on a host whose
    average busy share can still read below the crowded flag's."""

    def __init__(self, pids: Callable[[], Sequence[int]], server_pids: Sequence[int] = ()) -> None:
        self._pids = pids
        self._span_s = 0.0
        self._host_s = 0.0
        self._client_s = 0.0
        self._server_wait_ns = dict.fromkeys(server_pids, 0)

    @contextmanager
    def measuring(self) -> Iterator[None]:
        own0 = {pid: live_ticks(pid) for pid in self._pids()}
        wait0 = {pid: run_delay_ns(pid) for pid in self._server_wait_ns}
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
                for pid, ns in wait0.items():
                    self._server_wait_ns[pid] += max(0, run_delay_ns(pid) - ns)

    def summary(self) -> dict[str, float]:
        """run.json's client.host_cpu: cores busy on average over the timed span, the host's
        and loadgen's own, and the host's cores; with a server on this host, the wait for a
        core of the server process that waited most, its threads summed, over the span
        (`server_wait`: 0.5, one thread waiting half the time); empty where nothing was
        measured."""
        if self._span_s <= 0:
            return {}
        out = {
            "span_s": round(self._span_s, 3),
            "host_busy_cores": round(self._host_s / self._span_s, 2),
            "client_cores": round(self._client_s / self._span_s, 2),
            "cores": os.cpu_count() or 1,
        }
        if self._server_wait_ns:
            out["server_wait"] = round(max(self._server_wait_ns.values()) / 1e9 / self._span_s, 3)
        return out
