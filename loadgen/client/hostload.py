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
than the stream's overshoot in the 20-40 ms around it (bench/ceiling.md). So the server's
waits are also read every 2 ms beside the run (reading_server_waits), and each stream is judged
by its own server's wait around its TTFT (analysis/selferror.py's stream_server_waits).
"""

from __future__ import annotations

import multiprocessing
import os
import select
import signal
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from pathlib import Path

from loadgen.codec import to_json
from loadgen.lifeline import die_with
from loadgen.records import JsonlAppender, ServerWaitRead

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


class MainWaits:
    """How long each replica's server processes' main threads have waited, runnable, for a
    core (the second field of /proc/PID/schedstat, ns), summed per replica: one read a
    process, where the sum over its threads (run_delay_ns) costs one a thread, and a server's
    main thread is the one that takes the requests and writes the answers (firehose's only
    thread; vLLM's API server's event loop and its engine core's busy loop). Each process's
    file is opened once and read in place, each process once a read whatever the replicas
    sharing it: opened afresh, a read cost 10 us a process on the build machine, 0.5 us
    kept open. A process gone (or never found) counts 0 from then on."""

    def __init__(self, replicas: Sequence[Sequence[int]]) -> None:
        self._replicas = [tuple(pids) for pids in replicas]
        self._fds = {pid: _opened(f"/proc/{pid}/schedstat") for pids in replicas for pid in pids}

    def counts(self) -> list[int]:
        waits = {pid: _read_waited_ns(fd) for pid, fd in self._fds.items()}
        return [sum(waits[pid] for pid in pids) for pids in self._replicas]

    def close(self) -> None:
        for fd in self._fds.values():
            if fd is not None:
                os.close(fd)
        self._fds = dict.fromkeys(self._fds)


def _opened(path: str) -> int | None:
    try:
        return os.open(path, os.O_RDONLY)
    except OSError:
        return None


def _read_waited_ns(fd: int | None) -> int:
    """The wait for a core of an opened schedstat file (read from its start); 0 for none."""
    try:
        return 0 if fd is None else _wait_field(os.pread(fd, 256, 0))
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


# A local server's wait for a core is read this often: on 16-core hosts every stream that came
# late where no client stamp saw it had its server waiting longer than its overshoot around it
# (10 of 10 between reads 20 ms apart, 5-26 ms; 4 of 4 between reads 2 ms apart, 2.1-4.6 ms;
# bench/ceiling.md); reads 1 s apart charged a stream waits not its own (every stream of a
# build-machine run flagged, against 95-98%).
WAIT_READ_S = 0.002
# A read is kept once a replica's count has moved this much since the last one kept.
WAIT_STEP_NS = 100_000


class WaitReads:
    """Which reads of the servers' waits go to `sink`: the first; any after which a replica's
    count moved WAIT_STEP_NS or more since the last kept, with the read just before it (so
    a wait is placed between two reads WAIT_READ_S apart, not across a quiet stretch); and
    the last (`close`). Counts are from the first read, each kept from going down (a process
    gone takes its count with it)."""

    def __init__(self, sink: Callable[[ServerWaitRead], None]) -> None:
        self._sink = sink
        self._base: tuple[int, ...] | None = None
        self._counts: tuple[int, ...] = ()
        self._kept: tuple[int, ...] = ()
        self._pending: ServerWaitRead | None = None

    def take(self, t_ns: int, counts: Sequence[int]) -> None:
        if self._base is None:
            self._base = self._counts = self._kept = tuple(counts)
            self._sink(ServerWaitRead(t_ns, (0,) * len(counts)))
            return
        self._counts = tuple(map(max, self._counts, counts))
        read = ServerWaitRead(
            t_ns, tuple(c - b for c, b in zip(self._counts, self._base, strict=True))
        )
        if any(c - k >= WAIT_STEP_NS for c, k in zip(self._counts, self._kept, strict=True)):
            if self._pending is not None:
                self._sink(self._pending)
            self._sink(read)
            self._kept, self._pending = self._counts, None
        else:
            self._pending = read

    def close(self) -> None:
        if self._pending is not None:
            self._sink(self._pending)
            self._pending = None


@contextmanager
def reading_server_waits(
    replicas: Sequence[Sequence[int]],
    path: Path,
    run_start_ns: int,
    every_s: float = WAIT_READ_S,
) -> Iterator[None]:
    """While the block runs, every `every_s`, how long each replica's local server processes
    (`replicas`: their pids, in replica order) had waited for a core, their main threads
    summed, on the run clock, into the JSONL file `path` as WaitReads keeps them: the witness
    per stream of a server that lost its core between stamping an answer and sending it,
    where no client stamp sees. Read in a process of its own, begun before the block: a
    thread of this one cost the one-process client 15-20% of its requests/s on the build
    machine, each read taking the interpreter's lock from its event loop."""
    ctx = multiprocessing.get_context("spawn")  # no fork of a process with a running loop
    ready = ctx.Event()
    stop, stopping = ctx.Pipe(duplex=False)
    args = ([list(p) for p in replicas], str(path), run_start_ns, every_s, os.getpid(), ready, stop)
    proc = ctx.Process(target=_read_waits, args=args, name="loadgen-server-waits", daemon=True)
    proc.start()
    try:
        # A reader that died at its start sets nothing: the run goes on without its reads.
        deadline = time.monotonic() + READER_START_S
        while not ready.wait(0.01) and proc.is_alive() and time.monotonic() < deadline:
            pass
        yield
    finally:
        stopping.send_bytes(b"")  # this process holds the read end too: no broken pipe
        stopping.close()
        proc.join(READER_START_S)
        if proc.is_alive():
            proc.kill()
            proc.join()
        stop.close()


# How long the reading process may take to start, or to write its last read once stopped.
READER_START_S = 30.0


def _read_waits(
    replicas: list[list[int]],
    path: str,
    run_start_ns: int,
    every_s: float,
    parent: int,
    ready: Event,
    stop: Connection,
) -> None:
    """The reading process of reading_server_waits: its first read, then one every `every_s`
    until `stop` has something to read, then its last, each kept one written as it is taken.
    Its wait is a poll of that pipe: a multiprocessing Event's wait cost 40-90 us of CPU a
    read on the build machine, more than the reads. The kernel kills it with its parent (a
    SIGKILLed loadgen says nothing); Ctrl-C reaches the whole process group: the parent stops
    it, as it stops its client workers."""
    die_with(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        out = JsonlAppender(Path(path))
    except OSError:
        return  # no file to write: the run is judged without its server's waits
    reads = WaitReads(lambda read: out.append(to_json(read)))
    servers = MainWaits(replicas)
    stopped = select.poll()
    stopped.register(stop.fileno(), select.POLLIN)
    every_ms = every_s * 1e3

    def take() -> None:
        reads.take(time.perf_counter_ns() - run_start_ns, servers.counts())

    take()
    ready.set()
    while not stopped.poll(every_ms):
        take()
    take()
    reads.close()
    out.close()
    servers.close()
