"""Append-only run records: the contract between the client and every later stage.

Field names follow ../shared/DESIGN.md ("add freely; rename none"). A record is written once,
when its stream ends, and never mutated; reports recompute everything from these files.
"""

from __future__ import annotations

import operator
import os
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

import orjson

from loadgen.codec import CodecError, json_field, reader, to_json

TokenSource = Literal[
    "usage_continuous", "usage_final", "server_counter", "tokenizer", "chunk_count"
]
Status = Literal["ok", "error"]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StreamError:
    """Why a stream failed: `class` is a short stable name (http_429, idle_timeout, ...)."""

    cls: str = json_field(key="class")
    message: str = json_field()


# Not frozen, alone of the record types: a frozen dataclass sets each of its 62 fields through
# object.__setattr__, 8.9 us a record against 2.6, paid once a stream by the client and once a
# line by every reader of streams.jsonl. Nothing mutates one; dataclasses.replace makes another.
@dataclass(slots=True)
class StreamRecord:
    """One stream, start to end. All `t_*` and `chunk_ns` are ns since the run's start.

    `chunks` counts SSE events that carried content (text or tokens); role-only deltas, the
    usage-only event and `[DONE]` are not chunks. `chunk_ns[i]` is the arrival of content chunk
    i and `chunk_tokens[i]` its tokens where the server said (continuous usage), else the list
    is None. `token_source` names where `completion_tokens` came from.
    """

    id: str
    group: str
    rep: int
    status: Status
    error: StreamError | None
    api: str
    model: str
    prompt_tokens: int | None
    requested_prompt_tokens: int | None
    completion_tokens: int
    cached_tokens: int | None
    chunks: int
    events: int
    bytes: int
    token_source: TokenSource
    finish_reason: str | None
    http_status: int | None
    t_intended_ns: int
    t_sent_ns: int | None
    t_headers_ns: int | None
    t_first_ns: int | None
    t_last_ns: int | None
    t_done_ns: int | None
    chunk_ns: list[int] = field(default_factory=list)
    chunk_tokens: list[int] | None = None
    max_tokens: int | None = None
    # Tokens beyond max_tokens (a server that ignores the cap); 0 for a well-behaved one.
    over_max_tokens: int = 0
    parse_errors: int = 0
    # "measure" for the streams a report is about; "warmup", "prime" and "probe" streams are
    # recorded too (nothing is hidden) but analysis keeps them apart.
    phase: str = "measure"
    # Sweep arm this stream belongs to (None outside sweeps).
    arm: str | None = None
    # Multi-turn sessions: the conversation's id and this turn's index (None elsewhere).
    session: str | None = None
    turn: int | None = None
    # The answer's text, kept only for requests that asked (session turns) so the next turn
    # can resend it; never written to streams.jsonl.
    answer: str | None = json_field(default=None, omit="always")
    # A needle stream (loadgen/needle.py): the planted code, and whether the answer held it
    # (None for every other stream).
    needle_expected: str | None = None
    needle_hit: bool | None = None
    # The client's own error (client/selftime.py): body reads, reads that brought several
    # content chunks under one timestamp, the longest any of its reads may have waited for
    # the event loop and the longest its TTFT stamps may have (send, first content chunk; None
    # where not measured: no content chunk, or an older version).
    reads: int = 0
    coalesced_reads: int = 0
    loop_lag_max_ns: int | None = None
    loop_lag_ttft_ns: int | None = None
    # The connection's smoothed round-trip time (TCP_INFO tcpi_rtt, us) at its first body byte
    # (rawhttp's reader; at the stream's end where none came, and from aiohttp's): the
    # network's share of its TTFT, beside the server's; None where not measured.
    rtt_us: int | None = None
    # HTTP phases (rawhttp's reader only; None from aiohttp's and the virtual clock), so the
    # send side of a TTFT splits from its read side (analysis/phases.py): t_sent -> connect
    # (`t_connected_ns`: a connection opened for this stream; None when `conn_reused`, whose
    # connect belonged to an earlier stream) -> request written (`t_written_ns`: handed to the
    # kernel) -> t_headers -> first body byte (`t_first_byte_ns`) -> t_first. And what the
    # kernel said at the first body byte (`tcp_first_byte`): [RTT us, request bytes sent and
    # not yet acknowledged, bytes not yet sent (the kernel's and the transport's)], -1 where
    # the kernel does not count bytes (before 4.19). Read once per stream there, not also at
    # the write: one TCP_INFO read took 9.8 us on a loaded 2-core box, 5% of a 50-event
    # stream's own client time at 250k events/s.
    conn_reused: bool | None = None
    t_connected_ns: int | None = None
    t_written_ns: int | None = None
    t_first_byte_ns: int | None = None
    tcp_first_byte: list[int] | None = None
    # The server's id for the response (its first event's `id`), to join with its logs.
    response_id: str | None = None
    # Which worker streamed it where a run had several (e.g. "ray:10.0.0.5:4242"); None for a
    # single process.
    worker: str | None = None
    # Reasoning models (client/decode.py): content chunks whose delta carried only reasoning
    # text, the first output (non-reasoning) chunk's index and arrival (TTFO; equal to
    # t_first_ns for a model that does not reason), and the reasoning tokens with where they
    # came from (`usage_details`, or `estimated_*`; None where the stream did not reason).
    first_output_chunk: int | None = None
    t_first_output_ns: int | None = None
    reasoning_chunks: int = 0
    t_last_reasoning_ns: int | None = None
    reasoning_tokens: int | None = None
    reasoning_token_source: str | None = None
    # The plan's intent (StreamRequest.cold): True when every prompt token was salted, False
    # when the prompt was meant to share cached blocks, None in records written before it.
    cold: bool | None = None
    # Session turns with tools: the tool calls the stream answered with (parsed from
    # `delta.tool_calls`), and whether this request carried a tool's result back.
    tool_calls: int = 0
    tool_result: bool = False
    # The calls themselves, (id, name, arguments) each, kept for the request that sends the
    # tool's result; never written (as `answer`).
    calls: tuple[tuple[str, str, str], ...] | None = json_field(default=None, omit="always")
    # Which replica served it, an index into run.json's `targets` list (client/routing.py);
    # None for a run with one target.
    replica: int | None = None
    # An open loop with a seat cap (arrival `concurrency`): how long the arrival waited for a
    # free seat before its send (t_intended_ns is the seat's instant); None without a cap.
    seat_wait_ns: int | None = None
    # Honest lengths (analysis/lengths.py): the prompt's tokens by loadgen's own count of what
    # it sent (beside requested_prompt_tokens, asked, and prompt_tokens, the server's usage),
    # and whether the request asked the server to ignore EOS (max_tokens is then owed in
    # full); None in records written before them.
    prompt_tokens_sent: int | None = None
    ignore_eos: bool | None = None
    # The W3C traceparent header the request carried (--trace-context), to join a server's
    # traces; None where none was sent.
    traceparent: str | None = None
    # How long its server, where it runs on loadgen's host, waited for a core between the
    # stream's send and its first token (the kernel's count for the server's processes' main
    # threads, read at both by the client: client/hostload.py's ServerWait), ns; absent where
    # the server runs elsewhere, on the virtual clock, and without a first token.
    server_wait_ns: int | None = None


# A record as the tuple of its fields' values in field order (StreamRecord(*values) makes it
# again): how a client worker hands its records to the parent beside their JSON lines. Read
# back from the line, a record cost the parent 16 us (orjson.loads, then the codec's checks of
# a file's values), the bound of a 15-worker pool at 16-token answers; the tuple's unpickling
# and the constructor cost 5.
stream_values: Callable[[StreamRecord], tuple[Any, ...]] = operator.attrgetter(
    *(f.name for f in fields(StreamRecord))
)


class BadRecord(ValueError):
    """A line of a run file that is JSON but not the record it should be."""


def jsonl_line(obj: Any) -> bytes:
    """`obj` as one line of a JSONL file, its newline included."""
    return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n"


class JsonlAppender:
    """Appends one JSON object per line and flushes each, so a crash loses at most one line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh = open(path, "ab")  # noqa: SIM115 - lives as long as the run

    def append(self, obj: Any) -> None:
        self.write_lines(jsonl_line(obj))

    def write_lines(self, lines: bytes) -> None:
        """Writes lines as they are (encoded already, each newline included), in one write."""
        self._fh.write(lines)
        self._fh.flush()

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Yields each line of a JSONL file that is a JSON object; a torn last line (crash
    mid-write), a line that is not JSON and one that is not an object are skipped."""
    if not path.exists():
        return
    with open(path, "rb") as fh:
        for line in fh:
            if not line.endswith(b"\n"):
                break
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                yield obj


def read_records(path: Path, parse: Callable[[dict[str, Any]], T]) -> tuple[list[T], int]:
    """Every line of a JSONL file that `parse` makes a record of, and how many lines it
    skipped: torn, not JSON, not an object, or an object `parse` refused (BadRecord). The one
    reader of every run file, so a report says how many lines it lost and never crashes."""
    out: list[T] = []
    bad = 0
    if not path.is_file():
        return out, 0
    with open(path, "rb") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                obj = orjson.loads(line) if line.endswith(b"\n") else None
                if not isinstance(obj, dict):
                    raise BadRecord("not a JSON object")
                out.append(parse(obj))
            except (orjson.JSONDecodeError, BadRecord, CodecError):
                bad += 1
    return out, bad


def read_streams(run_dir: Path) -> list[StreamRecord]:
    return read_stream_file(run_dir)[0]


def read_stream_file(run_dir: Path) -> tuple[list[StreamRecord], int, int]:
    """streams.jsonl's records, each stream's first only (a stream counted twice would count
    its tokens and time twice: 5 measured of 4 planned, said nowhere), with the lines that
    could not be read and those that repeated a stream id read before."""
    read, unreadable = read_records(run_dir / "streams.jsonl", read_stream)
    seen: set[str] = set()
    first = []
    for r in read:
        if r.id not in seen:
            seen.add(r.id)
            first.append(r)
    return first, unreadable, len(read) - len(first)


# The server's log lines written during the run, copied beside the records (engine/server_log.py).
SERVER_LOG = "server.log"


class RecordSink(Protocol):
    """Takes each finished record. `line`: the bytes its arrival adds to streams.jsonl as a
    client worker encoded them (to_json's, a newline each), written as they are, so the parent
    that takes every worker's records spends no 6-13 us a record encoding it again. A batch
    (one read of a worker process's pipe, one message of a Ray actor) comes whole: its first
    record brings the lines of all, the others b"", one write for the batch (a write a record
    took 37% of the parent's reading thread's busy samples, and 3 of its 6 us a record).
    None: the record is encoded here."""

    def __call__(self, record: StreamRecord, line: bytes | None = None, /) -> None: ...


class RunDirectory:
    """One run's directory (DESIGN.md's layout): manifest plus append-only streams and metrics."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self.streams = JsonlAppender(path / "streams.jsonl")
        self.metrics = JsonlAppender(path / "metrics.jsonl")
        # Opened by the first sample of a run with several replicas (engine/replicas.py).
        self.replica_metrics: JsonlAppender | None = None

    def append_stream(self, record: StreamRecord, line: bytes | None = None) -> None:
        """`line`: what a client worker encoded for it (RecordSink), written as it is."""
        if line is None:
            self.streams.append(to_json(record))
        elif line:
            self.streams.write_lines(line)

    def append_metrics(self, sample: MetricsSample) -> None:
        self.metrics.append(to_json(sample))

    def append_replica_metrics(self, sample: MetricsSample) -> None:
        """One replica's own scrape, into replica_metrics.jsonl (metrics.jsonl gets the
        replicas' totals)."""
        if self.replica_metrics is None:
            self.replica_metrics = JsonlAppender(self.path / REPLICA_METRICS)
        self.replica_metrics.append(to_json(sample))

    def close(self) -> None:
        self.streams.close()
        self.metrics.close()
        if self.replica_metrics is not None:
            self.replica_metrics.close()


def install_stop_signals(on_stop: Callable[[int], object]) -> None:
    """Routes SIGINT/SIGTERM to `on_stop(signal number)` (cancel the run scope) on the running
    loop. The handler runs only when the running coroutine yields to the loop (the virtual
    clock's event loop, which awaits nothing real, yields every 50 ms for it)."""
    import asyncio

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_stop, sig)


def stop_exit_code(sig: int) -> int:
    """The shell's convention for a process stopped by a signal: 128 + its number (Ctrl-C 130,
    SIGTERM 143), so a caller can tell which stop it was."""
    return 128 + sig


# Canonical metric names in metrics.jsonl are vLLM v1's, without the `vllm:` prefix; the poller
# maps other servers' names (v0, SGLang, llama.cpp) onto them.
CANONICAL_METRICS = (
    "num_requests_running",
    "num_requests_waiting",
    "kv_cache_usage_perc",  # a fraction 0..1, as vLLM v1 exports it
    "num_preemptions_total",
    "prompt_tokens_total",
    "generation_tokens_total",
    "prefix_cache_queries_total",
    "prefix_cache_hits_total",
    "spec_decode_num_drafts_total",
    "spec_decode_num_draft_tokens_total",
    "spec_decode_num_accepted_tokens_total",
    "iteration_tokens_total_sum",
    "iteration_tokens_total_count",
    # Histogram sums and counts: a delta of each over a window gives that window's mean.
    "time_to_first_token_seconds_sum",
    "time_to_first_token_seconds_count",
    "inter_token_latency_seconds_sum",
    "inter_token_latency_seconds_count",
    # SGLang's own (poller.py says why they are apart): generation tokens counted at each
    # request's finish, its prefix cache hit rate and generation throughput gauges.
    "finished_generation_tokens_total",
    "cache_hit_rate",
    "gen_throughput",
)


@dataclass(frozen=True, slots=True)
class MetricsSample:
    """One /metrics scrape: `t_ns` on the run clock (when the response arrived), `values` by
    canonical name (only those the server exported), `error` when the scrape failed."""

    t_ns: int
    # Numbers as the server wrote them (an int stays an int: reports print what was scraped).
    values: dict[str, int | float] = field(default_factory=dict)
    error: str | None = None
    # The replica scraped (replica_metrics.jsonl); None in metrics.jsonl, which holds one
    # server's samples or, for several replicas, their totals.
    replica: int | None = json_field(omit="none", default=None)
    # When the scrape was sent, where it precedes t_ns: the server rendered the values between
    # the two, so a window that must hold everything up to t1 ends at a scrape asked at or
    # after t1 (a scrape answered after a first token may hold the counters from before it).
    t_asked_ns: int | None = json_field(omit="none", default=None)


REPLICA_METRICS = "replica_metrics.jsonl"


def read_metrics(run_dir: Path) -> list[MetricsSample]:
    return read_records(run_dir / "metrics.jsonl", read_metrics_sample)[0]


# One streams.jsonl / metrics.jsonl object as its record; CodecError names the field that does
# not fit (a `t_sent_ns` that is a string once crashed every report). The codec's made reader
# took 0.60x the time of the hand-written check loop it replaced on 10,520 soak stream rows.
read_stream = reader(StreamRecord)
read_metrics_sample = reader(MetricsSample)
