"""The most requests per second and streams in flight loadgen sustains on this host, by client
workers and answer length, with its timing error and its own flags at each point.

Several firehose processes (../shared/tools/firehose, built into build/; TTFT 0, no gaps: the
server adds nothing) serve behind loadgen's repeatable --base-url (round-robin), so one server
thread is not the bound. Per point `loadgen request -n N -c C --workers W --max-tokens T` runs
against them; a ladder of C per (W, T) finds the ceiling. Each point's row: requests/s (ok
streams over the span from the first send to the last end), streams in flight (C asked, and
the mean by Little's law: the streams' summed time over the span), loadgen's TTFT p50 error
against firehose's own (its log, joined per replica on the response id), the share of streams
loadgen flagged client_limited (or a crowded host), and what bound the point: `servers` when a
firehose process used >= 85% of a core over the run, `parent` when (with workers) a thread of
the process that takes every worker's records did (its busiest thread is named: a Ray
driver's process runs above a core on Ray's threads), `loadgen` when the client's processes
did (per worker), else `host` when the two together filled the cores, else `-`. `waited`: the
share of the traffic the firehose process that waited most for a core spent waiting, runnable
(the kernel's schedstat, read every 2 ms on a thread of the bench); `rule`: the streams the
run did not flag whose server waited for a core at least their tolerance around their TTFT by
the bench's reads, the second witness of the run's own judgement by its server's wait; a
missed stream is printed with its server's own wait around it and the host's busy share in
the 100 ms around it, the witnesses of time lost before its bytes could be read (firehose
stamps its first chunk before its send()).

The ratios (for bench/harness.py): loadgen's ceiling over a bare aiohttp + orjson loop's
requests/s (bench/client_ingest.py's) at the same C and answer length, against one firehose,
measured in the same run; and the best such point whose CPU was measured: its client's CPU a
request over the floor loop's (client_ingest.floor_rate: raw uvloop protocols, each answer's
events json-parsed, nothing kept), loadgen's cost a request in multiples of the least a client
timing streams pays.
`--ray` runs every ladder a second time with the workers as Ray actors on a local two-node
cluster started for it (`--ray ADDRESS` of `loadgen request`; the `ray` extra), their rows
marked `r`, the client's CPU then the driver's and every process of the cluster's.
`--profile FILE` runs the best point once more under py-spy (the `profile` extra), sampling
every process of the command, and prints where the parent's and the workers' CPU in the
client stage went, by function.

    .venv/bin/python bench/ceiling.py [--smoke | --full] [--workers 1 8 15] [--tokens 1 16 256]
        [--concurrency 64 256 1024 4096] [--servers K] [--seconds S] [--max-seconds S]
        [--out DIR] [--profile F] [--ray]
"""

from __future__ import annotations

import bisect
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field, replace
from importlib.util import find_spec
from pathlib import Path

import orjson
import uvloop
from client_ingest import (
    REPO,
    bare_rate,
    firehose_binary,
    floor_rate,
    free_port,
    wait_listening,
)
from client_truth import (
    read_delay_ns,
    read_flagged,
    request_number,
    run_crowded,
    run_server_waits,
    server_times,
)
from harness import Ratio, parser, ratio, report, unavailable

sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from loadgen.analysis.selferror import HOST_BUSY_LIMIT, error_bound_s, tolerance_s
from loadgen.client.hostload import (
    TICK_S,
    cpu_ticks,
    host_busy_s,
    live_ticks,
    processes,
    run_delay_ns,
    stat_ticks,
    with_descendants,
)
from loadgen.records import StreamRecord, read_streams

from support.ray_cluster import Cluster, local_ray_cluster, ray_processes

CORES = os.cpu_count() or 1
BUSY = 0.85  # a process at this share of a core or more is the bound
RAY_LOOKUP_EVERY = 25  # samples between two looks for a Ray cluster's processes (0.5 s)
SAMPLE_S = 0.02  # CPU counters read this often during a point (ticks are 10 ms)
# Each server's wait for a core is read this often, on a thread of its own: the kernel counts
# it in ns, so a few ms of a missed stream's can be placed to a few ms, where the CPU samples'
# 20 ms bracket held 5-26 ms of its server's wait (bench/ceiling.md, host G).
WAIT_SAMPLE_S = 0.002
MIN_CPU_SAMPLES = 10  # inside a point's traffic, for its CPU columns (0.2 s of 10 ms ticks)
# The host's busy share is read over windows this long (5 samples; on 16 cores, 160 ticks, so
# a tick is 0.6% of a window): the run's crowded flag judges its traffic's average, and a
# missed stream asks whether its own moment was busier.
BUSY_WINDOW_NS = 100_000_000
ERR_TOLERANCE_MS = 1.0  # the goal: TTFT p50 error under 1 ms
SPY_RATE = 100  # py-spy's samples a second of each process, for --profile
PROFILE_S = 1.0  # the profiled point's traffic at the least, seconds at its rate
SMOKE = {"workers": [1], "tokens": [1, 16], "concurrency": [8, 32], "seconds": 0.5, "first_n": 200}
FULL = {
    "workers": sorted({1, max(1, CORES // 2), max(1, CORES - 1)}),
    "tokens": [1, 16, 256],
    "concurrency": [64, 256, 1024, 4096],
    "seconds": 4.0,
    "first_n": 4000,
}  # fmt: skip  (first_n: requests a worker at a ladder's first C, no rate yet)
# Requests per point at most (--max-requests): the analysis after each point costs ~0.5 ms of a
# core a stream (bench/analysis_scale.py), so on 2 cores a point past this spends more time
# judging than sending; a 16-core host at 50,000 req/s needs more to run a second.
MAX_N = 16_384


@dataclass(frozen=True)
class Missed:
    """A stream read later than its tolerance after firehose wrote its first token, that the
    run did not flag: its server (replica index), firehose's stamp of that write
    (CLOCK_MONOTONIC ns), the delay from it to loadgen's stamp, and how far past the error
    bound the run charged it the delay went, ms."""

    replica: int
    stamp_ns: int
    delay_ns: int
    over_ms: float
    # Its witnesses: how long its server waited for a core (the kernel's count, schedstat)
    # between the reads of it around its delay, ms (firehose stamps its first chunk before
    # its send(), so a server that lost its core between the two wrote the bytes late, where
    # no client stamp sees it); whether the wait rule fired on it (Waits.rule); and, read
    # from the point's CPU samples once it has run, the host's busy share of its cores in
    # the BUSY_WINDOW_NS around it.
    server_wait_ms: float = math.nan
    rule: bool = False
    busy: float = math.nan
    # The run's own read of its server's wait around its send and first token (the term its
    # error bound holds), ms; NaN where the run read none.
    run_wait_ms: float = math.nan


@dataclass(frozen=True)
class Point:
    workers: int
    servers: int
    tokens: int
    concurrency: int
    ok: int
    req_s: float
    in_flight: float
    err_p50_ms: float
    err_p99_ms: float
    flagged: float
    # Streams whose own first-token stamp came later than their tolerance (selferror's) after
    # firehose wrote it, that the run did not flag (client_truth.py's read_flagged): 0 when
    # every such one is.
    missed: float
    server_cpu: float  # the busiest firehose process, cores
    client_cpu: float  # the client's processes together, cores
    parent_cpu: float  # the command's own process (with workers: the one merging records)
    # Its busiest thread, cores: the bound where it nears one. A Ray driver's process ran at
    # 1.0-2.2 cores with Ray's own threads beside the one that takes the records.
    thread_cpu: float
    host_cpu: float  # every process on the host, neighbours' too, cores
    bound: str
    span_s: float  # the traffic: first send to last end, over which the cpu columns count
    wall_s: float  # the whole command: its start, the traffic, its analysis and files
    ray: bool = False  # the workers were Ray actors
    missed_streams: tuple[Missed, ...] = ()
    thread: str = ""  # that thread's name: `main` (the event loop's), else the kernel's comm
    # The host's busy cores by the run's own count (run.json's client.host_cpu, over its
    # timed traffic), which its crowded-host flag judges: the second witness beside `host_cpu`
    # where a missed stream asks why the run did not flag its host. NaN where it counted none.
    run_host_cpu: float = math.nan
    # The run's own count of its server's wait for a core (client.host_cpu's server_wait),
    # which its crowded flag judges too.
    run_server_wait: float = math.nan
    # The share of the traffic's BUSY_WINDOW_NS windows at or past the crowded flag's
    # HOST_BUSY_LIMIT (NaN: none measured).
    busy_windows: float = math.nan
    # The share of the traffic the server that waited most for a core spent waiting for one
    # (runnable, not running: the kernel's schedstat): the point's baseline beside each missed
    # stream's own wait. NaN where the traffic was too short to measure.
    server_wait: float = math.nan
    # The share of the streams the run did not flag on which the bench's own wait rule
    # (Waits.rule) fires: the second witness of the run's judgement by its server's wait
    # (every thread of the server read by the bench, the main thread by loadgen), near 0 where
    # the two agree. NaN where the waits were not read.
    rule_flags: float = math.nan

    @property
    def missed_over_ms(self) -> float | None:
        """The most a missed stream's read delay went past the error bound the run judged it
        by (selferror's error_bound_s, its server's wait by the run's reads in it), ms; None
        when none was missed. Small against the delay: the delay began before the data could
        be read; near it: the bound did not see the loop's stall."""
        return max((m.over_ms for m in self.missed_streams), default=None)

    @property
    def client_us_per_req(self) -> float:
        """The client's CPU a request over the span, us (its processes together): what a
        host's cores buy in requests/s when loadgen is the bound."""
        return self.client_cpu / self.req_s * 1e6

    @property
    def series(self) -> tuple[int, int, bool]:
        """The ladder the point belongs to: (W, T, over Ray)."""
        return self.workers, self.tokens, self.ray

    @property
    def shown_workers(self) -> str:
        """W as the table shows it: `r` marks Ray actors."""
        return f"{self.workers}{'r' if self.ray else ''}"

    @property
    def name(self) -> str:
        return f"W={self.shown_workers} T={self.tokens}"


def tree_ticks(root: int) -> int:
    """utime + stime of `root` and its live children (loadgen's worker processes), ticks."""
    return sum(t for pid, (ppid, t) in processes().items() if root in (pid, ppid))


@dataclass(frozen=True)
class Sample:
    """CPU counters at one moment of a point: perf_counter ns, each server's ticks, the
    client's process tree's ticks, the command's own process's ticks, the host's busy
    seconds, and the command's threads' ticks."""

    ns: int
    servers: tuple[int, ...]
    client: int
    parent: int
    host_s: float
    threads: dict[int, int] = field(default_factory=dict)  # the command's: tid -> ticks


def sample(servers: list[int], client: int, also: list[int]) -> Sample:
    """The counters now; `also`: more of the client's processes (a Ray cluster's)."""
    return Sample(time.perf_counter_ns(), tuple(cpu_ticks(p) for p in servers),
                  tree_ticks(client) + sum(map(live_ticks, also)), cpu_ticks(client),
                  host_busy_s(), thread_ticks(client))  # fmt: skip


@dataclass(frozen=True)
class Waits:
    """Each server's wait for a core over a point (the kernel's count: runnable, not
    running, ns), read every WAIT_SAMPLE_S: the perf_counter ns of each read and the servers'
    counts then, in replica order."""

    ns: list[int] = field(default_factory=list)
    waits: list[tuple[int, ...]] = field(default_factory=list)

    def around_ms(self, replica: int, start_ns: int, end_ns: int) -> float:
        """How long server `replica` waited for a core between the last read at or before
        `start_ns` and the first at or after `end_ns`, ms; NaN where the reads do not bracket
        the span."""
        i = bisect.bisect_right(self.ns, start_ns) - 1
        j = bisect.bisect_left(self.ns, end_ns)
        if i < 0 or j >= len(self.ns):
            return math.nan
        return (self.waits[j][replica] - self.waits[i][replica]) / 1e6

    def share(self, start_ns: int, end_ns: int) -> float:
        """The most any server waited for a core between the first and last reads inside
        [start_ns, end_ns], as a share of that time; NaN with none or one there."""
        i = bisect.bisect_left(self.ns, start_ns)
        j = bisect.bisect_right(self.ns, end_ns) - 1
        if j <= i:
            return math.nan
        waited = max(y - x for x, y in zip(self.waits[i], self.waits[j], strict=True))
        return waited / (self.ns[j] - self.ns[i])

    def rule(self, rec: StreamRecord, zero_ns: int) -> bool:
        """The server's half of the rule loadgen judges a stream by where its server is on its
        host (its error bound adds the server's wait to its own error,
        selferror.stream_server_waits), from the bench's own reads: `rec`'s server waited for a
        core, around the stream's own send to first token, at least the stream's tolerance.
        False where the reads do not bracket it."""
        assert rec.t_sent_ns is not None and rec.t_first_ns is not None
        waited = self.around_ms(rec.replica or 0, zero_ns + rec.t_sent_ns, zero_ns + rec.t_first_ns)
        return waited >= tolerance_s(rec) * 1e3


@contextmanager
def reading_waits(servers: list[int]) -> Iterator[Waits]:
    """Waits read on a thread of its own while the block runs, and once more at its end."""
    out, stop = Waits(), threading.Event()

    def read() -> None:
        out.ns.append(time.perf_counter_ns())
        out.waits.append(tuple(map(run_delay_ns, servers)))

    def loop() -> None:
        while not stop.wait(WAIT_SAMPLE_S):
            read()

    read()
    thread = threading.Thread(target=loop, name="waits", daemon=True)
    thread.start()
    try:
        yield out
    finally:
        stop.set()
        thread.join()
        read()


def thread_ticks(pid: int) -> dict[int, int]:
    """utime + stime of each live thread of a process, ticks; {} once the process has gone."""
    out = {}
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        with suppress(OSError):  # a thread gone between the listing and the read
            out[int(stat.parent.name)] = stat_ticks(stat)
    return out


def thread_name(pid: int, tid: int) -> str:
    """`main` for the process's first thread, else the kernel's name of it: Ray names its
    own; Python's other threads carry the process's name (3.11-3.12 name none); "" once it
    has gone."""
    if tid == pid:
        return "main"
    try:
        return Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
    except OSError:
        return ""


def window_cpu(
    samples: list[Sample], start_ns: int, end_ns: int
) -> tuple[tuple[float, float, float, float, float], int | None]:
    """Cores used between the samples nearest inside [start_ns, end_ns] (the traffic: first
    send to last end, loadgen's perf clock): the busiest server, the client's processes, the
    command's own process, its busiest thread, the host; and that thread's id. The command's
    whole wall also holds its start and its analysis after the run, one core busy for a minute
    at 35,000 streams, which read as a `loadgen` bound at any load. NaN each (and no thread)
    where the traffic was too short to measure."""
    # A 50 ms traffic (2,000 requests at 40,000/s) holds 2 samples of 10 ms ticks; taken
    # over the command's whole wall instead, its analysis read as a `parent` bound.
    ends = bracket(samples, start_ns, end_ns, MIN_CPU_SAMPLES)
    if ends is None:
        return (math.nan,) * 5, None
    a, b = ends
    span = (b.ns - a.ns) / 1e9
    server = max((y - x) * TICK_S / span for x, y in zip(a.servers, b.servers, strict=True))
    # A thread born inside the window counts from 0 ticks.
    used = {tid: ticks - a.threads.get(tid, 0) for tid, ticks in b.threads.items()}
    tid = max(used, key=used.__getitem__, default=None)
    thread = math.nan if tid is None else used[tid] * TICK_S / span
    return (server, (b.client - a.client) * TICK_S / span, (b.parent - a.parent) * TICK_S / span,
            thread, (b.host_s - a.host_s) / span), tid  # fmt: skip


def bracket(
    samples: list[Sample], start_ns: int, end_ns: int, least: int = 2
) -> tuple[Sample, Sample] | None:
    """The first and last samples inside [start_ns, end_ns], between which a figure is read;
    None with fewer than `least` (two at the least) there."""
    inside = [s for s in samples if start_ns <= s.ns <= end_ns]
    return (inside[0], inside[-1]) if len(inside) >= least else None


def busy_share(samples: list[Sample], start_ns: int, end_ns: int) -> float:
    """The host's busy share of its cores between the samples nearest inside [start_ns,
    end_ns]; NaN with fewer than two there."""
    ends = bracket(samples, start_ns, end_ns)
    if ends is None:
        return math.nan
    a, b = ends
    return (b.host_s - a.host_s) / ((b.ns - a.ns) / 1e9) / CORES


def busy_window_share(samples: list[Sample], start_ns: int, end_ns: int) -> float:
    """The share of the whole BUSY_WINDOW_NS windows of [start_ns, end_ns] in which the host
    was at least HOST_BUSY_LIMIT busy; NaN where the span holds none."""
    shares = [busy_share(samples, t, t + BUSY_WINDOW_NS)
              for t in range(start_ns, end_ns - BUSY_WINDOW_NS + 1, BUSY_WINDOW_NS)]  # fmt: skip
    measured = [x for x in shares if not math.isnan(x)]
    if not measured:
        return math.nan
    return sum(x >= HOST_BUSY_LIMIT for x in measured) / len(measured)


def start_servers(binary: Path, k: int, logs: Path) -> list[tuple[subprocess.Popen, int, Path]]:
    """k firehose processes, TTFT 0 and no gaps, each logging what it sent."""
    out = []
    for i in range(k):
        port, log = free_port(), logs / f"fh{i}.csv"
        cmd = [str(binary), "--port", str(port), "--ttft-ms", "0", "--itl-ms", "0", "--log",
               str(log), "--exit-after", "900", "--quiet"]  # fmt: skip
        out.append((subprocess.Popen(cmd, stdout=subprocess.DEVNULL), port, log))
    for _, port, _ in out:
        wait_listening(port)
    return out


def stop_servers(servers: list[tuple[subprocess.Popen, int, Path]]) -> None:
    for proc, _, _ in servers:
        proc.send_signal(signal.SIGINT)  # flushes its log
    for proc, _, _ in servers:
        proc.wait(10)


def request_argv(servers: list[tuple[subprocess.Popen, int, Path]], workers: int, tokens: int,
                 c: int, n: int, out: Path) -> list[str]:  # fmt: skip
    """`loadgen request` of a point: n requests of `tokens`-token answers at C=c from `workers`
    processes over every server, its run directory `out`."""
    urls = [a for _, port, _ in servers for a in ("--base-url", f"http://127.0.0.1:{port}")]
    return [sys.executable, "-m", "loadgen", "request", *urls, "-n", str(n), "-c", str(c),
            "--max-tokens", str(tokens), "--prompt-tokens", "8", "--out", str(out),
            "--workers", str(workers)]  # fmt: skip


def run_point(binary: Path, k: int, workers: int, tokens: int, c: int, n: int, tmp: Path,
              ray: Cluster | None = None) -> Point:  # fmt: skip
    """One point: fresh servers, `loadgen request` (its workers Ray actors on `ray`), its
    records joined with the servers' logs."""
    # A folder of its own even where a ladder names one C twice (a second, sized point).
    tag = Path(tempfile.mkdtemp(prefix=f"w{workers}t{tokens}c{c}{'r' if ray else ''}-", dir=tmp))
    servers = start_servers(binary, k, tag)
    cmd = [*request_argv(servers, workers, tokens, c, n, tag / "run"),
           *(["--ray", ray.address] if ray else [])]  # fmt: skip
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=REPO)  # fmt: skip
        pids = [p.pid for p, _, _ in servers]
        # The cluster's processes, looked up again now and then: actors start with the run.
        cluster: list[int] = []
        samples = [sample(pids, proc.pid, cluster)]
        names: dict[int, str] = {}  # the command's threads, named while they live
        with reading_waits(pids) as waits:
            while proc.poll() is None:
                time.sleep(SAMPLE_S)
                if ray is not None and len(samples) % RAY_LOOKUP_EVERY == 1:
                    cluster = with_descendants(ray_processes(ray.temp_dir))
                samples.append(sample(pids, proc.pid, cluster))
                for tid in samples[-1].threads.keys() - names.keys():
                    names[tid] = thread_name(proc.pid, tid)
        _, stderr = proc.communicate()
    finally:
        stop_servers(servers)
    recs = [r for r in read_streams(tag / "run") if r.status == "ok"] if proc.returncode < 2 else []
    if not recs:
        tail = " | ".join(stderr.strip().splitlines()[-3:])
        raise SystemExit(f"W={workers} T={tokens} C={c}: no ok stream ({proc.returncode}): {tail}")
    manifest = orjson.loads((tag / "run" / "run.json").read_bytes())
    zero = manifest["run_start_perf_ns"]
    start = zero + min(r.t_sent_ns or r.t_intended_ns for r in recs)
    end = zero + max(r.t_done_ns or r.t_last_ns or 0 for r in recs)
    cpu, tid = window_cpu(samples, start, end)
    wall = (samples[-1].ns - samples[0].ns) / 1e9
    truths = [server_times(log) for _, _, log in servers]
    crowded = run_crowded(tag / "run")
    p = point(recs, truths, zero, workers, tokens, c, cpu, wall, crowded, waits,
              run_server_waits(tag / "run", recs))  # fmt: skip
    half = BUSY_WINDOW_NS // 2
    host_cpu = manifest["client"].get("host_cpu", {})
    return replace(p, ray=ray is not None, thread=names.get(tid, ""),
                   missed_streams=tuple(
                       replace(m, busy=busy_share(samples, m.stamp_ns - half, m.stamp_ns + half))
                       for m in p.missed_streams),
                   busy_windows=busy_window_share(samples, start, end),
                   run_host_cpu=host_cpu.get("host_busy_cores", math.nan),
                   run_server_wait=host_cpu.get("server_wait", math.nan))  # fmt: skip


def point(
    recs: list[StreamRecord],
    truths: list[dict[int, tuple[int, int]]],
    zero_ns: int,
    workers: int,
    tokens: int,
    c: int,
    cpu: tuple[float, float, float, float, float],
    wall_s: float,
    crowded: bool,
    waits: Waits | None = None,
    run_waits: Mapping[str, int] | None = None,
) -> Point:
    """A point's row from its ok records, the servers' logs and the CPU (cores) used by the
    busiest server, the client, its parent process, that one's busiest thread and the whole
    host; `crowded`: the run said its host was (client_truth.run_crowded), which flags every
    stream; `waits`: the servers' waits for a core over it as the bench read them, which its
    wait rule judges; `run_waits`: each stream's as the run read them, which its flag
    judges (client_truth.run_server_waits)."""
    waits, run_waits = waits or Waits(), run_waits or {}
    errors, missed, ruled = [], [], 0
    for r in recs:
        truth = truths[r.replica or 0].get(request_number(r.response_id) or -1)
        if truth is None or r.t_first_ns is None or r.t_sent_ns is None:
            continue
        errors.append((r.t_first_ns - r.t_sent_ns - (truth[1] - truth[0])) / 1e6)
        flagged = read_flagged(r, crowded, run_waits.get(r.id))
        rule = not flagged and waits.rule(r, zero_ns)
        ruled += rule
        # The read error the flag has to bound.
        delay_ns = read_delay_ns(r, zero_ns, truth[1])
        if delay_ns / 1e9 > tolerance_s(r) and not flagged:
            run_wait = run_waits.get(r.id)
            over_ms = delay_ns / 1e6 - (error_bound_s(r, run_wait) or 0) * 1e3
            waited = waits.around_ms(r.replica or 0, truth[1], truth[1] + delay_ns)
            run_wait_ms = math.nan if run_wait is None else run_wait / 1e6
            missed.append(Missed(r.replica or 0, truth[1], delay_ns, over_ms, waited, rule,
                                 run_wait_ms=run_wait_ms))  # fmt: skip
    if not errors:
        raise SystemExit(f"W={workers} T={tokens} C={c}: no stream joined firehose's logs")
    start = min(r.t_sent_ns or r.t_intended_ns for r in recs)
    end = max(r.t_done_ns or r.t_last_ns or 0 for r in recs)
    span_s = (end - start) / 1e9
    busy_s = sum(((r.t_done_ns or r.t_last_ns or 0) - (r.t_sent_ns or 0)) / 1e9 for r in recs)
    flagged = sum(read_flagged(r, crowded, run_waits.get(r.id)) for r in recs)
    return Point(workers, len(truths), tokens, c, len(recs), len(recs) / span_s, busy_s / span_s,
                 statistics.median(errors), statistics.quantiles(errors, n=100)[98],
                 flagged / len(recs), len(missed) / len(errors), *cpu, bound_by(*cpu, workers),
                 span_s, wall_s, missed_streams=tuple(missed),
                 server_wait=waits.share(zero_ns + start, zero_ns + end),
                 rule_flags=ruled / len(errors) if waits.ns else math.nan)  # fmt: skip


def bound_by(
    server_cpu: float,
    client_cpu: float,
    parent_cpu: float,
    thread_cpu: float,
    host_cpu: float,
    workers: int,
) -> str:
    """`servers`: a firehose process near a whole core; `parent`: with workers, a thread of
    the process that takes every worker's records near a core (the process itself may run
    above one, a Ray driver's does, without any of its threads being the bound); `loadgen`:
    the client's processes near a core each; `host`: none of these, but the host's cores
    near full (neighbours' processes too); `-`: none (the closed loop waits on the wire);
    `short`: the traffic was too short to measure its CPU (window_cpu)."""
    if math.isnan(host_cpu):
        return "short"
    if server_cpu >= BUSY:
        return "servers"
    if workers > 1 and thread_cpu >= BUSY:
        return "parent"
    if client_cpu >= BUSY * min(workers, CORES):
        return "loadgen"
    if host_cpu >= BUSY * CORES:
        return "host"
    return "-"


def ladder(binary: Path, k: int, workers: int, tokens: int, cs: list[int], seconds: float,
           first_n: int, max_n: int, deadline: float, tmp: Path,
           ray: Cluster | None = None) -> list[Point]:  # fmt: skip
    """The points of one (W, T): each C sized to run about `seconds` at the rate before, none
    started past `deadline` (time.monotonic). Every point gets the k servers, each worker
    routing its share over all of them."""
    # The first point has no rate to size it: first_n a worker, so that W workers' first
    # point is not over before the CPU counters can see it.
    out, n = [], first_n * workers
    for c in cs:
        if time.monotonic() > deadline:
            print(f"skipped W={workers} T={tokens} C={c}: past --max-seconds", flush=True)
            continue
        n = min(max_n, max(4 * c, n))
        p = run_point(binary, k, workers, tokens, c, n, tmp, ray)
        out.append(p)
        print(row(p), flush=True)
        n = int(p.req_s * seconds)
    return out


HEAD = (f"{'W':>3} {'S':>2} {'T':>4} {'C':>5} {'ok':>7} {'req/s':>8} {'in flight':>9}"
        f" {'err p50':>8} {'p99':>7} {'flagged':>7} {'missed':>6} {'srv cpu':>7} {'waited':>6}"
        f" {'rule':>5} {'cli cpu':>7}"
        f" {'us/req':>6} {'parent':>6} {'thread':>6}"
        f" {'host':>5}"
        f" {'bound':<7} {'span s':>6} {'wall s':>6}")  # fmt: skip


def row(p: Point) -> str:
    return (f"{p.shown_workers:>3} {p.servers:>2} {p.tokens:>4} {p.concurrency:>5} {p.ok:>7}"
            f" {p.req_s:>8,.0f} {p.in_flight:>9,.0f} {p.err_p50_ms:>+8.2f} {p.err_p99_ms:>+7.2f}"
            f" {p.flagged:>7.0%} {p.missed:>6.1%} {p.server_cpu:>7.2f} {p.server_wait:>6.0%}"
            f" {p.rule_flags:>5.1%} {p.client_cpu:>7.2f}"
            f" {p.client_us_per_req:>6.0f} {p.parent_cpu:>6.2f} {p.thread_cpu:>6.2f}"
            f" {p.host_cpu:>5.2f}"
            f" {p.bound:<7} {p.span_s:>6.2f} {p.wall_s:>6.1f}")  # fmt: skip


def cpu_description(cpuinfo: str, siblings: str | None) -> str:
    """The host's CPU as /proc/cpuinfo names it, its first core's clock and (from a core's
    thread_siblings_list) its threads a core: hosts of one kind differ more than any cut, so a
    table says which CPU it came from. Parts the host does not give are left out."""
    info: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            info.setdefault(key.strip(), value.strip())
    parts = [info["model name"]] if info.get("model name") else []
    with suppress(KeyError, ValueError):
        parts.append(f"{float(info['cpu MHz']):,.0f} MHz")
    threads = _cpulist_len(siblings or "")
    if threads:
        parts.append(f"{threads} thread{'s' if threads > 1 else ''} a core")
    return ", ".join(parts)


def _cpulist_len(cpulist: str) -> int:
    """The CPUs in a kernel cpulist ("0,8" or "0-1"); 0 for text that is not one."""
    n = 0
    for part in cpulist.strip().split(","):
        first, _, last = part.partition("-")
        try:
            n += int(last or first) - int(first) + 1
        except ValueError:
            return 0
    return n


def this_cpu() -> str:
    """cpu_description of this host ("" without /proc and /sys)."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
    try:
        siblings = Path("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list").read_text()
    except OSError:
        siblings = None
    return cpu_description(cpuinfo, siblings)


def ceiling_table(points: list[Point], k: int) -> str:
    """Every point, then per (W, T) the ceiling: the most req/s, the most streams in flight
    with the TTFT p50 error within ERR_TOLERANCE_MS, and the first C with any stream flagged."""
    cpu = this_cpu()
    lines = [f"loadgen request against S firehose processes (TTFT 0, no gaps; {k} behind the"
             f" round-robin of each worker), {CORES} CPUs{f' ({cpu})' if cpu else ''},"
             f" load average {os.getloadavg()[0]:.2f} at the end", HEAD]  # fmt: skip
    lines += [row(p) for p in points]
    lines.append("ceiling per (W, T): most req/s; most req/s and streams in flight with err"
                 f" p50 < {ERR_TOLERANCE_MS:g} ms; first C flagged")  # fmt: skip
    for key in dict.fromkeys(p.series for p in points):
        ps = [p for p in points if p.series == key]
        top = max(ps, key=lambda p: p.req_s)
        within = [p for p in ps if p.err_p50_ms < ERR_TOLERANCE_MS]
        best = max(within, key=lambda p: p.req_s, default=None)
        held = (
            "none"
            if best is None
            else (
                f"{best.req_s:,.0f} req/s at C={best.concurrency},"
                f" {max(p.in_flight for p in within):,.0f} in flight"
            )
        )
        first_flag = next((str(p.concurrency) for p in ps if p.flagged > 0), "none")
        busiest = (
            f", the parent's busiest thread {top.thread} {top.thread_cpu:.2f}" if top.thread else ""
        )
        lines.append(f"  {top.name}: {top.req_s:,.0f} req/s at C={top.concurrency}"
                     f" ({top.bound}{busiest}); within error: {held}; flags from C="
                     f"{first_flag}")  # fmt: skip
        lines += [f"    C={p.concurrency}: {p.missed:.2%} missed, their read delay past the bound"
                  f" charged by up to {p.missed_over_ms:.3f} ms; the run counted the host"
                  f" {p.run_host_cpu:.2f} cores busy (its crowded flag from"
                  f" {HOST_BUSY_LIMIT * CORES:.2f}) and its server's wait for a core"
                  f" {p.run_server_wait:.0%} of it, and >= {HOST_BUSY_LIMIT:.0%} busy in"
                  f" {p.busy_windows:.0%} of the traffic's {BUSY_WINDOW_NS // 1_000_000} ms"
                  f" windows; each missed stream (past its bound, its server's wait for a core"
                  f" around it by the bench's reads and by the run's, the host around it):"
                  f" {_each_missed(p)}; the bench's wait rule"
                  f" caught {sum(m.rule for m in p.missed_streams)} of {len(p.missed_streams)}"
                  for p in ps if p.missed_over_ms is not None]  # fmt: skip
    lines.append("(W = client workers (r: Ray actors), S = firehose processes, T = answer"
                 " tokens, C = streams asked; err = loadgen TTFT - firehose's own per stream,"
                 " ms; flagged ="
                 " client_limited or crowded host; missed = the first token stamped later than its"
                 " tolerance after firehose wrote it, yet not flagged; waited = the share of the"
                 " traffic the firehose process that waited most for a core waited (the kernel's"
                 f" schedstat, read every {WAIT_SAMPLE_S * 1e3:g} ms); rule = the streams the"
                 " run did not flag whose server waited for a core at least their tolerance between"
                 " their send and first token by the bench's own reads (the run judges its own);"
                 " cpu in cores over"
                 " the traffic (span): the busiest firehose"
                 " process, the client's processes together (us/req: their"
                 " CPU a request, us), the command's process (parent) and its busiest thread,"
                 " the host; wall:"
                 " the whole command, its start and analysis too;"
                 f" bound at >= {BUSY:.0%} of a core; short: a traffic too short for the CPU"
                 f" counters, under {MIN_CPU_SAMPLES * SAMPLE_S:g} s)")  # fmt: skip
    return "\n".join(lines)


def _each_missed(p: Point) -> str:
    """The missed streams' figures as the missed line prints them, the latest first."""
    each = sorted(p.missed_streams, key=lambda m: m.over_ms, reverse=True)
    return ", ".join(
        f"{m.over_ms:.2f} / {m.server_wait_ms:.2f} / {m.run_wait_ms:.2f} ms / {m.busy:.0%}"
        for m in each
    )


def plot(points: list[Point], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax_err) = plt.subplots(1, 2, figsize=(11, 4))
    for key in dict.fromkeys(p.series for p in points):
        ps = [p for p in points if p.series == key]
        xs = [p.concurrency for p in ps]
        ax.plot(xs, [p.req_s for p in ps], marker="o", label=ps[0].name)
        ax_err.plot(xs, [p.err_p50_ms for p in ps], marker="o", label=ps[0].name)
    for a, label in ((ax, "requests/s"), (ax_err, "TTFT p50 error, ms")):
        a.set_xscale("log", base=2)
        a.set_xlabel("streams asked (C)")
        a.set_ylabel(label)
        a.grid(alpha=0.3)
    ax_err.axhline(ERR_TOLERANCE_MS, color="grey", linestyle="--")
    ax.legend(fontsize=7)
    fig.suptitle(f"loadgen ceiling, {CORES} CPUs")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def bare_ratios(binary: Path, points: list[Point]) -> list[Ratio]:
    """Per answer length, loadgen's best 1-worker point against the bare loop at its C (req/s),
    and the best of those whose CPU was measured (not `short`) against the floor loop at its C
    (CPU a request; client_ingest.floor_rate: what timing a stream costs at the least, the
    rest is loadgen's own work a request). A busy host can leave a smoke's points all short:
    that row then says so instead of failing the bench."""
    out = []
    for t in dict.fromkeys(p.tokens for p in points):
        ones = [p for p in points if p.tokens == t and p.workers == 1 and not p.ray]
        if not ones:
            continue
        top = max(ones, key=lambda p: p.req_s)
        port = free_port()
        proc = subprocess.Popen([str(binary), "--port", str(port), "--ttft-ms", "0", "--itl-ms",
                                 "0", "--exit-after", "600", "--quiet"],
                                stdout=subprocess.DEVNULL)  # fmt: skip
        try:
            wait_listening(port)
            url = f"http://127.0.0.1:{port}"
            n = max(top.ok, 4 * top.concurrency)
            rate = uvloop.run(bare_rate(url, top.concurrency, n, t))
            out.append(ratio(f"loadgen req/s / bare loop's, T={t} C={top.concurrency} W=1",
                             top.req_s, n / (rate.ns / 1e9), "req/s"))  # fmt: skip
            out.append(cpu_ratio(url, t, ones, rate.events // n))
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(10)
    return out


def cpu_ratio(url: str, tokens: int, ones: list[Point], events: int) -> Ratio:
    """The best of `ones` (1-worker points) whose CPU was measured: its client's CPU a request
    over the floor loop's at its C, the floor held to the bare loop's `events` an answer;
    unavailable, said why, when every point was too short to measure."""
    compared = f"loadgen CPU a request / floor loop's, T={tokens} W=1"
    timed = [p for p in ones if not math.isnan(p.client_cpu)]
    if not timed:
        return unavailable(compared, "every 1-worker point too short for the CPU counters")
    best = max(timed, key=lambda p: p.req_s)
    n = max(best.ok, 4 * best.concurrency)
    floor, floor_cpu_s = uvloop.run(floor_rate(url, best.concurrency, n, tokens))
    if floor.events != n * events:
        raise SystemExit(f"T={tokens}: the floor loop took {floor.events:,} events of "
                         f"{n:,} answers, the bare loop {events} an answer")  # fmt: skip
    return ratio(f"loadgen CPU a request / floor loop's, T={tokens} C={best.concurrency} W=1",
                 best.client_us_per_req, floor_cpu_s / n * 1e6, "us",
                 ",.1f")  # fmt: skip


def profile(binary: Path, k: int, top: Point, path: Path, tmp: Path) -> str:
    """The best point again with py-spy sampling every process of the command (the parent
    and each worker) into FILE (folded stacks); returns where each one's CPU in the client
    stage went (stack_summary). Without py-spy, or where it cannot attach, one line says so."""
    spy = shutil.which("py-spy")
    if spy is None:
        return "profile: needs py-spy on PATH (pip install 'loadgen[profile]')"
    servers = start_servers(binary, k, tmp)
    # At least a second of its traffic: sampled at SPY_RATE, a shorter one says little.
    n = max(top.ok, 4 * top.concurrency, math.ceil(top.req_s * PROFILE_S))
    # Blocking (each process paused a moment a sample): py-spy's stacks may be torn without
    # it. The table's points ran unprofiled, so the pauses touch none of its figures.
    request = request_argv(servers, top.workers, top.tokens, top.concurrency, n, tmp / "run")
    cmd = [spy, "record", "--subprocesses", "--rate", str(SPY_RATE), "--format", "raw",
           "-o", str(path), "--", *request]  # fmt: skip
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    finally:
        stop_servers(servers)
    if done.returncode != 0 or not path.is_file():
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"profile: py-spy failed ({done.returncode}): {why}"
    head = (
        f"profile: W={top.workers} T={top.tokens} C={top.concurrency}, {n:,} requests, "
        f"py-spy at {SPY_RATE} samples/s of each process (uvloop's loop, Runner.run, holds its "
        f"waits in epoll too); stacks in {path}"
    )
    return head + "\n" + stack_summary(path.read_text(), SPY_RATE)


# py-spy's raw format: one line a distinct stack, outermost frame first, behind the label of
# each process from py-spy's own child down (`process PID:"CMDLINE";`), then its count. A
# worker's command line holds a `;` of its own (spawn_main's).
_PROCESS = re.compile(r'process (\d+):"(.*?)";')
_LINE_NO = re.compile(r":\d+\)$")
# The client stage's frames, less any import: the streams and, with workers, the records'
# way to the parent (its reading thread), not the command's start, prompts or analysis.
CLIENT_FRAME = "(loadgen/client/"
IMPORT_FRAME = "(<frozen importlib."
# The parent's reading thread waiting on its workers' pipes: py-spy counts a thread in this
# select as busy (34% of the parent's samples at 2 workers), so it is left out.
WAIT_FRAME = "(selectors.py)"


def _sample(line: str) -> tuple[str, str, list[str], int] | None:
    """A raw line's (pid, command line, frames less their line numbers, count) of the
    innermost process; None for any other line."""
    body, _, count = line.rpartition(" ")
    pid = cmdline = ""
    while m := _PROCESS.match(body):
        pid, cmdline, body = m[1], m[2], body[m.end() :]
    if not pid or not count.isdigit():
        return None
    return pid, cmdline, [_LINE_NO.sub(")", f) for f in body.split(";")], int(count)


def stack_summary(raw: str, rate: int, top: int = 12) -> str:
    """Per role (the command's process; its spawned workers), the CPU seconds sampled in the
    client stage and the functions that took them: own time (the frame on top; the event
    loop's own code, uvloop's polling, socket reads and dispatch, shows as `Runner.run`) and
    loadgen's functions with what they called."""
    own: dict[str, Counter[str]] = {"command": Counter(), "workers": Counter()}
    held: dict[str, Counter[str]] = {"command": Counter(), "workers": Counter()}
    pids: dict[str, set[str]] = {"command": set(), "workers": set()}
    for line in raw.splitlines():
        sample = _sample(line)
        if sample is None:
            continue
        pid, cmdline, frames, count = sample
        role = "workers" if "multiprocessing-fork" in cmdline else "command"
        if (
            not any(CLIENT_FRAME in f for f in frames)
            or any(IMPORT_FRAME in f for f in frames)
            or frames[-1].endswith(WAIT_FRAME)
        ):
            continue
        pids[role].add(pid)
        own[role][frames[-1]] += count
        for f in dict.fromkeys(frames):  # a recursive function counts once a sample
            if "(loadgen/" in f:
                held[role][f] += count
    out = []
    for role in ("command", "workers"):
        busy = sum(own[role].values())
        if not busy:
            continue
        out.append(f"{role} ({len(pids[role])} process(es)): {busy / rate:.2f} s of CPU in the "
                   f"client stage; own time:")  # fmt: skip
        out += [f"  {n / busy:6.1%}  {f}" for f, n in own[role].most_common(top)]
        out.append("  loadgen's functions with their callees:")
        out += [f"  {n / busy:6.1%}  {f}" for f, n in held[role].most_common(top)]
    return "\n".join(out) if out else "profile: no sample in the client stage"


@contextmanager
def ray_cluster(wanted: bool, workers: int) -> Iterator[Cluster | None]:
    """A local Ray cluster of two nodes with a CPU for each of `workers` actors, when
    `wanted`; one line and exit 2 without the ray extra."""
    if not wanted:
        yield None
        return
    if find_spec("ray") is None:
        raise SystemExit("ceiling: --ray needs the ray extra (pip install 'loadgen[ray]')")
    with local_ray_cluster(extra_nodes=1, cpus=max(2, math.ceil(workers / 2))) as cluster:
        yield cluster


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--full", action="store_true", help="the full size (the default)")
    ap.add_argument("--workers", type=int, nargs="+")
    ap.add_argument("--tokens", type=int, nargs="+")
    ap.add_argument("--concurrency", type=int, nargs="+")
    ap.add_argument("--seconds", type=float, help="about how long each point runs")
    ap.add_argument(
        "--servers",
        type=int,
        default=max(2, CORES // 4),
        help="firehose processes behind the round-robin (default: CPUs/4, >= 2)",
    )
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "ceiling",
                    help="folder for ceiling.txt, ceiling.png and points.jsonl")  # fmt: skip
    ap.add_argument("--profile", type=Path, help="py-spy's stacks of the best point into FILE")
    ap.add_argument("--ray", action="store_true",
                    help="each ladder again over Ray actors on a local 2-node cluster")  # fmt: skip
    ap.add_argument("--max-requests", type=int, default=MAX_N,
                    help=f"requests per point at most (default {MAX_N:,})")  # fmt: skip
    ap.add_argument(
        "--max-seconds",
        type=float,
        default=math.inf,
        help="start no point after this many seconds (the table has those done)",
    )
    args = ap.parse_args()
    size = SMOKE if args.smoke else FULL
    workers = args.workers or size["workers"]
    tokens = args.tokens or size["tokens"]
    cs = args.concurrency or size["concurrency"]
    seconds = args.seconds or size["seconds"]
    binary = firehose_binary()
    if binary is None:
        raise SystemExit("ceiling: needs firehose (a C compiler and ../shared/tools/firehose)")
    with tempfile.TemporaryDirectory() as tmp, ray_cluster(args.ray, max(workers)) as ray:
        print(HEAD, flush=True)
        deadline = time.monotonic() + args.max_seconds
        points = [p for cluster in dict.fromkeys((None, ray)) for w in workers for t in tokens
                  for p in ladder(binary, args.servers, w, t, cs, seconds,
                                  int(size["first_n"]), args.max_requests, deadline,
                                  Path(tmp), cluster)]  # fmt: skip
        if not points:
            raise SystemExit("ceiling: no point started within --max-seconds")
        table = ceiling_table(points, args.servers)
        print(table)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "ceiling.txt").write_text(table + "\n")
        (args.out / "points.jsonl").write_bytes(b"".join(orjson.dumps(asdict(p)) + b"\n"
                                                         for p in points))  # fmt: skip
        plot(points, args.out / "ceiling.png")
        print(f"wrote {args.out}/ceiling.txt, ceiling.png, points.jsonl")
        if args.profile:
            top = max((p for p in points if not p.ray), key=lambda p: p.req_s)
            prof_dir = Path(tmp) / "profile"
            prof_dir.mkdir()
            print(profile(binary, args.servers, top, args.profile, prof_dir))
        report(bare_ratios(binary, points), args.ratios)


if __name__ == "__main__":
    main()
