"""Added TTFT: the client's mean TTFT minus the server's own TTFT histogram mean over the same
requests, i.e. what loadgen, the network and the API server add to each request's first token.

The histogram (vLLM's and SGLang's time_to_first_token_seconds) has no label per group, so its
_sum and _count are read as deltas between two polls: the last at or before the first send of
a set of streams and the first at or after its last end (the engine scrapes at every rep's
edges, so a rep's window holds no warmup or prime). Not its last first token: the server
observes a TTFT after it sent the token, and on a busy API server later still (a CPU vLLM's
histogram had counted 26 of 32 first tokens at the first poll after the client's last one).
A window is the set's only when no other request that could reach the histogram (any stream
not refused with an HTTP status) was in flight inside it; the run's figure sums its reps'
windows, a group's is given only where its windows are its own. The server's count over the
windows must equal the streams timed, or the figure says so: it then compares different sets
of requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from loadgen.analysis import rates
from loadgen.analysis.timeline import Timeline
from loadgen.records import StreamRecord

SUM, COUNT = "time_to_first_token_seconds_sum", "time_to_first_token_seconds_count"
MS = 1e3


@dataclass(frozen=True, slots=True)
class AddedTtft:
    """One set of streams (the run, or one group) against the histogram's rise over its
    windows. `server_requests` None: some window held other requests (`note` says which)."""

    scope: str  # "run" or a group's name
    streams: int  # measured streams with a first content chunk
    windows: int  # reps whose windows were read
    client_ttft_ms: float
    server_requests: int | None
    server_ttft_ms: float | None
    note: str | None = None
    json_derived: ClassVar[tuple[str, ...]] = ("added_ms", "matched")

    @property
    def added_ms(self) -> float | None:
        """Client mean minus server mean, per request."""
        if self.server_ttft_ms is None:
            return None
        return self.client_ttft_ms - self.server_ttft_ms

    @property
    def matched(self) -> bool:
        """The server counted exactly the requests the client timed."""
        return self.server_requests == self.streams


@dataclass(frozen=True, slots=True)
class AddedTtftBlock:
    """summary.json's run.added_ttft. `histogram` False: the server exports no TTFT histogram."""

    histogram: bool
    run: AddedTtft | None = None
    # Groups whose windows held no other group's requests; empty when none was alone.
    groups: tuple[AddedTtft, ...] = ()
    # Why groups have no figure of their own (several were in flight together).
    groups_note: str | None = None


def added_ttft(
    measure: Sequence[StreamRecord],
    everyone: Sequence[StreamRecord],
    timeline: Timeline,
    speed: float,
) -> AddedTtftBlock | None:
    """The block for a run (None: no measured stream had a first token). `speed` is a sim's
    time factor: its histogram is in engine seconds, wall seconds times the speed."""
    timed = [r for r in measure if rates.ttft_s(r) is not None]
    if not timed:
        return None
    if not (timeline.has(SUM) and timeline.has(COUNT)):
        return AddedTtftBlock(histogram=False)
    whole = _scope("run", timed, everyone, timeline, speed)
    groups = sorted({r.group for r in timed})
    if len(groups) == 1:
        return AddedTtftBlock(True, whole, (), None)
    apart = [_scope(g, [r for r in timed if r.group == g], everyone, timeline, speed)
             for g in groups]  # fmt: skip
    alone = tuple(a for a in apart if a.server_requests is not None)
    note = None if alone else "groups were in flight together: the histogram has no group label"
    return AddedTtftBlock(True, whole, alone, note)


def _scope(
    scope: str,
    timed: list[StreamRecord],
    everyone: Sequence[StreamRecord],
    timeline: Timeline,
    speed: float,
) -> AddedTtft:
    ids = {r.id for r in timed}
    others = [r for r in everyone if r.id not in ids and _may_reach_histogram(r)]
    total_s = count = 0.0
    crowded: list[str] = []
    reps = sorted({r.rep for r in timed})
    for rep in reps:
        recs = [r for r in timed if r.rep == rep]
        t0 = min(rates.sent_ns(r) for r in recs)
        t1 = max(rates.end_ns(r) for r in recs)
        s, c = timeline.outer_delta(SUM, t0, t1), timeline.outer_delta(COUNT, t0, t1)
        if s is None or c is None:
            crowded.append(f"rep {rep}: no polls around its window")
            continue
        # A TTFT may be observed anywhere in a life inside the polls; one that ended at the
        # opening poll's instant (a warmup whose end the rep-edge scrape follows) is outside.
        inside = [r for r in others if rates.life_overlaps(r, c[1], c[2])]
        if inside:
            crowded.append(f"rep {rep}: {len(inside)} other request(s) in flight ({inside[0].id})")
        total_s += s[0]
        count += c[0]
    client_ms = sum(rates.ttft_s(r) or 0.0 for r in timed) / len(timed) * MS
    if crowded:
        return AddedTtft(scope, len(timed), len(reps), client_ms, None, None, "; ".join(crowded))
    n = round(count)
    server_ms = None if n <= 0 else total_s / n / speed * MS
    note = None
    if n != len(timed):
        note = f"the server's histogram counted {n} requests, loadgen timed {len(timed)}"
    return AddedTtft(scope, len(timed), len(reps), client_ms, n, server_ms, note)


def _may_reach_histogram(r: StreamRecord) -> bool:
    """A request the server may have given a first token: all but those refused by status."""
    return r.http_status is None or r.http_status < 400
