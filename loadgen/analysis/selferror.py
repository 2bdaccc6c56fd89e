"""Whether loadgen's own timing error makes a stream's figures untrustworthy.

A stream's *error bound* is the largest of how late loadgen sent it (t_sent - t_intended), the
longest its TTFT stamps may have waited for the event loop (client/selftime.py: the first
content chunk's read, from the loop's ticks, and the send's where a wait sits between stamp
and write) and, where rawhttp stamped it, the time loadgen's own process held the request
before the kernel had it (analysis/phases.py's write phase), never a stall elsewhere in the
window that no stamp waited for. The bound is
judged against one tolerance: CLIENT_ERROR_FRACTION of the stream's TTFT, or
CLIENT_ERROR_FLOOR_S, whichever is larger: a TTFT cannot be quoted to better than the client's
own error, and no timer is finer than ~1 ms.
The lag that touched any of its stamps and the reads that brought several content chunks at
once are given alongside: those chunks share a timestamp, so the gaps between them are void
as server evidence, and a gap is uncertain by that lag. What no client stamp can see, client
processes taking every core of a local server's host, is judged for the whole run
(crowding), as is an event loop late beyond LOOP_LAG_LIMIT_MS. The send side is judged too:
a stream whose request waited beyond the same tolerance before the server's response head
(connect + write + head, analysis/phases.py) is counted by who held it, so a TTFT that is
partly a late request read is flagged, not silent. ClientLimits holds all of it for the
banner the report composes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from loadgen.analysis.phases import http_phases
from loadgen.client.hostload import LOOPBACK
from loadgen.codec import json_field
from loadgen.records import StreamRecord

CLIENT_ERROR_FRACTION = 0.05
CLIENT_ERROR_FLOOR_S = 0.001
ADVICE = "run fewer streams per process (--workers N) or on more cores"
# `--strict` exit code of a run or probe with client-limited streams: distinct from a failure (1),
# a usage error (2) and an interrupt (130).
CLIENT_LIMITED_EXIT = 3
NS = 1_000_000_000
# Client event-loop lag above this makes every timestamp of the run suspect.
LOOP_LAG_LIMIT_MS = 50.0


def error_bound_s(rec: StreamRecord, server_wait_ns: int | None = None) -> float | None:
    """The stream's timing error bound in seconds; None for records without self-measurement.
    `server_wait_ns`: how long its server, on this host, waited for a core between its send
    and its first token (stream_server_waits): a server that lost its core to the client's
    processes wrote late where no client stamp sees it. That wait adds to the client's own
    error, not the larger of the two: the server's wait delays the bytes before they exist,
    the client's loop lag their read after they came (on a 16-core host a stream came 1.30 ms
    after firehose wrote it, 0.33 ms past the larger alone; bench/ceiling.md)."""
    own = _own_error_ns(rec)
    return None if own is None else (own + (server_wait_ns or 0)) / NS


def _own_error_ns(rec: StreamRecord) -> int | None:
    """The client's own part of a stream's error bound, ns: its late send, its loop's lag
    around the first token or its own write of the request, whichever is largest (one loop's
    stalls, which overlap); None for records without self-measurement."""
    if rec.loop_lag_ttft_ns is None or rec.t_sent_ns is None:
        return None
    late = max(0, rec.t_sent_ns - rec.t_intended_ns)
    phases = http_phases(rec)
    own_send = 0 if phases is None else phases.write_ns
    return max(late, rec.loop_lag_ttft_ns, own_send)


def stream_server_waits(
    records: Iterable[StreamRecord], host_cpu: Mapping[str, float]
) -> dict[str, int]:
    """By stream id, how long its server, where it ran on this host, waited for a core between
    its send and its first token, ns, as its client read it (the record's server_wait_ns):
    none where loadgen's processes were not the host's main load over the timed traffic
    (`host_cpu`: run.json's client.host_cpu, loadgen_busy): a server that keeps the cores
    busy by itself waits on its own threads, its own latency. On a 16-core host every stream
    that came later than its tolerance with none of its own stamps late (4 of 240,000 at
    81-84% busy) had its server waiting longer than its tolerance around it (bench/ceiling.md)."""
    if not loadgen_busy(host_cpu):
        return {}
    return {r.id: r.server_wait_ns for r in records if r.server_wait_ns is not None}


def tolerance_s(rec: StreamRecord) -> float:
    ttft = (
        None if rec.t_first_ns is None or rec.t_sent_ns is None else rec.t_first_ns - rec.t_sent_ns
    )
    return max(CLIENT_ERROR_FLOOR_S, CLIENT_ERROR_FRACTION * (ttft or 0) / NS)


def server_waited(records: Iterable[StreamRecord], server_waits: Mapping[str, int]) -> int:
    """How many of `records` had their server wait for a core longer than their tolerance
    around their TTFT (`server_waits`: stream_server_waits)."""
    return sum(
        (w := server_waits.get(r.id)) is not None and w / NS > tolerance_s(r) for r in records
    )


def client_error_evidence(
    rec: StreamRecord, server_wait_ns: int | None = None
) -> dict[str, Any] | None:
    """The evidence that `rec` is client_limited, or None when its error is within tolerance;
    `server_wait_ns` as error_bound_s takes it (None: the run read no server on its host)."""
    bound = error_bound_s(rec, server_wait_ns)
    if bound is None:
        return None
    tol = tolerance_s(rec)
    if bound <= tol:
        return None
    late = max(0, (rec.t_sent_ns or 0) - rec.t_intended_ns) / NS
    waited = {} if server_wait_ns is None else {"server_wait_s": server_wait_ns / NS}
    own = bound - (server_wait_ns or 0) / NS  # the client's own part (_own_error_ns)
    if not server_wait_ns:
        what = "loadgen's own timing error"
    elif own:
        what = (
            f"loadgen's own timing error {own * 1e3:.1f} ms and its server's wait for a core on "
            f"this host {server_wait_ns / NS * 1e3:.1f} ms:"
        )
    else:
        what = "its server, on this host, waited for a core"
    return waited | {
        "reason": (
            f"{what} {bound * 1e3:.1f} ms > tolerance {tol * 1e3:.1f} ms"
            f" ({CLIENT_ERROR_FRACTION:.0%} of TTFT or {CLIENT_ERROR_FLOOR_S * 1e3:g} ms)"
        ),
        "error_bound_s": bound,
        "tolerance_s": tol,
        "late_s": late,
        "loop_lag_ttft_s": (rec.loop_lag_ttft_ns or 0) / NS,
        "loop_lag_max_s": (rec.loop_lag_max_ns or 0) / NS,
        "coalesced_reads": rec.coalesced_reads,
        "reads": rec.reads,
        "advice": ADVICE,
    }


def send_late_holder(rec: StreamRecord) -> str | None:
    """Who held the send side of a stream whose request waited beyond its tolerance before
    the server's response head (analysis/phases.py's SEND_HOLDERS), else None."""
    phases = http_phases(rec)
    if phases is None or phases.send_ns / NS <= tolerance_s(rec):
        return None
    return phases.send_holder()


def send_late_by_holder(records: Iterable[StreamRecord]) -> dict[str, int]:
    """How many of `records` had a send side late beyond tolerance, by who held it."""
    return dict(Counter(h for h in map(send_late_holder, records) if h is not None))


# Who of analysis/phases.py's SEND_HOLDERS is loadgen's own process.
LOADGEN_HOLDERS = ("client",)


# A host whose cores were this busy on average over the timed traffic, most of it loadgen's
# own, with the server on it: its sends and the kernel's deliveries waited for a core where no
# client stamp sees it (client/hostload.py: 88-96% busy missed 1-24 streams a point unflagged,
# 63-84% none).
HOST_BUSY_LIMIT = 0.85


@dataclass(frozen=True, slots=True)
class Crowding:
    """Client processes that take every core of the host a local server runs on: by their
    count, or measured (`busy_cores`, `client_cores`: run.json's client.host_cpu, the
    host's and loadgen's own cores busy over the timed traffic; None when judged by count),
    with the server's wait for a core where the run counted it (`server_wait`)."""

    host: str
    workers: int
    cores: int
    busy_cores: float | None = None
    client_cores: float | None = None
    server_wait: float | None = None


def crowding(host: str | None, workers: int, cores: int) -> Crowding | None:
    """Whether a run's TTFTs are off though no stream's own stamps were: client processes that
    take every core of the host the server runs on. The server then reads each request when a
    client process lets go of its core, and that wait lands inside every TTFT where no client
    stamp can see it (bench/client_truth.py, 2 workers + firehose on 2 cores: its request reads
    3.6 ms late at p50, 238 of 256 streams off by more than their tolerance, none flagged by
    their stamps). None when the server is elsewhere or a core is left for it."""
    if host not in LOOPBACK or workers < cores:
        return None
    return Crowding(host, workers, cores)


def loadgen_busy(host_cpu: Mapping[str, float]) -> bool:
    """Whether loadgen's own processes were at least half of the host's busy cores over the
    timed traffic (`host_cpu`: run.json's client.host_cpu; False where it measured nothing):
    a server that keeps the cores busy by itself (vLLM's CPU build) is its own latency, not
    loadgen's error."""
    return bool(host_cpu) and host_cpu["client_cores"] >= host_cpu["host_busy_cores"] / 2


def busy_host(host: str | None, workers: int, host_cpu: Mapping[str, float]) -> Crowding | None:
    """Whether the timed traffic found the host of a local server (`host`, the target's)
    busy past HOST_BUSY_LIMIT of its cores, at least half of it loadgen's own processes (a
    server that keeps the cores busy by itself is its own latency, not loadgen's error); None
    when it was not, the server is elsewhere, or the run measured nothing (`host_cpu` empty).
    The server's own wait for a core, where the run counted it, goes with the judgement as
    its witness; it does not judge: on the build machine runs with a late stream unflagged
    and runs with none both had their server waiting 7-9% of the traffic (bench/ceiling.md)."""
    if host not in LOOPBACK or not loadgen_busy(host_cpu):
        return None
    busy, own, cores = host_cpu["host_busy_cores"], host_cpu["client_cores"], host_cpu["cores"]
    if busy < HOST_BUSY_LIMIT * cores:
        return None
    return Crowding(host, workers, int(cores), busy, own, host_cpu.get("server_wait"))


def host_crowding(url: str | None, workers: int, host_cpu: Mapping[str, float]) -> Crowding | None:
    """The run's one judgement of a crowded host, from run.json: as its timed traffic found
    the host (busy_host), else by count, loadgen's processes as many as the cores the run
    recorded (crowding); None where neither holds or the run recorded nothing of its host."""
    if not host_cpu:
        return None
    host = urlsplit(url or "").hostname
    return busy_host(host, workers, host_cpu) or crowding(host, workers, int(host_cpu["cores"]))


@dataclass(frozen=True, slots=True)
class ClientLimits:
    """Why loadgen's own timing may sit in a run's figures: `limited` measured streams whose
    own error exceeded tolerance (their verdict is client_limited), `beyond_tolerance` more that
    kept a server verdict which outweighed that error, the event loop's worst lag where it
    exceeded LOOP_LAG_LIMIT_MS (else None), a crowded host, the streams whose send side
    was late beyond tolerance by who held it (`send_late`: send_late_by_holder), and those
    whose server waited for a core beyond it (`server_waited`)."""

    measured: int
    limited: int = 0
    beyond_tolerance: int = 0
    loop_lag_max_ms: float | None = None
    crowding: Crowding | None = None
    loop_lag_limit_ms: float = LOOP_LAG_LIMIT_MS
    send_late: dict[str, int] = field(default_factory=dict)
    # Measured streams whose server, on this host, waited for a core longer than their
    # tolerance between their send and first token (stream_server_waits), in either count.
    server_waited: int = json_field(omit="default", default=0)

    @property
    def send_late_loadgen(self) -> int:
        """Late send sides that loadgen's own process held (its write of the request). Those
        the server held are not loadgen's error: vLLM 0.26 sends its response head only after
        its API server has preprocessed the request, so on the H200 at 64 in flight 421 of 512
        heads came beyond tolerance, held by the server; that time is the API server's (in
        added TTFT), and the report's phases line says so."""
        return sum(self.send_late.get(who, 0) for who in LOADGEN_HOLDERS)

    @property
    def limits_run(self) -> bool:
        return bool(
            self.limited or self.beyond_tolerance or self.loop_lag_max_ms is not None
            or self.crowding or self.send_late_loadgen
        )  # fmt: skip
