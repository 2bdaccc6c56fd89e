"""A stream's HTTP phases: where its TTFT went between loadgen's send stamp and its first
content chunk, and who held its send side (loadgen, the kernel, the server).

The phases are consecutive intervals between the stamps rawhttp takes once per stream
(records.py): connect (t_sent -> t_connected, 0 on a kept-alive connection), write (-> the
request handed to the kernel), head (-> the response head complete), first byte (-> the first
body byte) and first chunk (-> the first content chunk), so they sum to the TTFT by
construction; a test holds the stamps to one clock and one order. The *send side* is connect +
write + head: until the server answered the request at all. The sim sends the head as it
reads the request; vLLM 0.26 only once its API server has preprocessed it (on the H200 at 64
in flight 421 of 512 heads came beyond tolerance), so a late head held by the server is the
server's time, not loadgen's: only a late write counts against the run (selferror.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from loadgen.records import StreamRecord

PHASES = ("connect", "write", "head", "first_byte", "first_chunk")
# Who held the send side: loadgen's process (write), the TCP handshake (connect), the network
# and kernel (one round trip of the head wait) and the server (the rest of it).
SEND_HOLDERS = ("client", "connect", "kernel", "server")


@dataclass(frozen=True, slots=True)
class HttpPhases:
    """One stream's phases in ns (PHASES' order), and the kernel's RTT (ns) where it said."""

    connect_ns: int
    write_ns: int
    head_ns: int
    first_byte_ns: int
    first_chunk_ns: int
    rtt_ns: int | None

    @property
    def durations_ns(self) -> tuple[int, ...]:
        return (self.connect_ns, self.write_ns, self.head_ns, self.first_byte_ns,
                self.first_chunk_ns)  # fmt: skip

    @property
    def send_ns(self) -> int:
        return self.connect_ns + self.write_ns + self.head_ns

    def send_holders_ns(self) -> dict[str, int]:
        """The send side by holder (SEND_HOLDERS): the head wait's first round trip is the
        network's and the kernel's (the request out, the head back), the rest the server's."""
        kernel = min(self.head_ns, self.rtt_ns or 0)
        return {"client": self.write_ns, "connect": self.connect_ns, "kernel": kernel,
                "server": self.head_ns - kernel}  # fmt: skip

    def send_holder(self) -> str:
        """Who held the largest share of the send side."""
        held = self.send_holders_ns()
        return max(SEND_HOLDERS, key=held.__getitem__)


def http_phases(rec: StreamRecord) -> HttpPhases | None:
    """The stream's phases; None where a stamp is missing (aiohttp's reader, the virtual
    clock, a stream that failed before its first content chunk)."""
    sent, written, head = rec.t_sent_ns, rec.t_written_ns, rec.t_headers_ns
    first_byte, first = rec.t_first_byte_ns, rec.t_first_ns
    if sent is None or written is None or head is None or first_byte is None or first is None:
        return None
    connected = sent if rec.conn_reused else rec.t_connected_ns
    if connected is None:
        return None
    tcp = rec.tcp_first_byte
    return HttpPhases(
        connect_ns=connected - sent,
        write_ns=written - connected,
        head_ns=head - written,
        first_byte_ns=first_byte - head,
        first_chunk_ns=first - first_byte,
        rtt_ns=None if tcp is None else tcp[0] * 1000,
    )


@dataclass(frozen=True, slots=True)
class PhaseSummary:
    """A run's phases over its measured streams that carry them (summary.json's run
    `http_phases`): each phase's p50 and p90 in ms (PHASES' order of keys), how many of them
    rode a kept-alive connection, and who held each send side (SEND_HOLDERS, streams)."""

    stamped: int
    reused: int
    p50_ms: dict[str, float]
    p90_ms: dict[str, float]
    held_by: dict[str, int]


def phase_summary(records: Iterable[StreamRecord]) -> PhaseSummary | None:
    """The phases of `records` in sum; None where none carries them."""
    pairs = [(r, p) for r in records if (p := http_phases(r)) is not None]
    if not pairs:
        return None
    ms = np.array([p.durations_ns for _, p in pairs], dtype=float) / 1e6
    p50, p90 = np.percentile(ms, [50, 90], axis=0)
    held = Counter(p.send_holder() for _, p in pairs)
    return PhaseSummary(
        stamped=len(pairs),
        reused=sum(bool(r.conn_reused) for r, _ in pairs),
        p50_ms={name: float(v) for name, v in zip(PHASES, p50, strict=True)},
        p90_ms={name: float(v) for name, v in zip(PHASES, p90, strict=True)},
        held_by={who: held[who] for who in SEND_HOLDERS if held[who]},
    )
