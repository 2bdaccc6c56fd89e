"""The streaming client for OpenAI-compatible servers: one aiohttp session, one watchdog.

`OpenAIClient.stream(req)` sends one `stream: true` request and returns its StreamRecord. It
never raises for server, network or protocol faults: those become `status="error"` records with
a stable error class (errors.ERROR_CLASSES). For http:// targets the stream is read by
rawhttp's protocol, which stamps each socket read once as the loop delivers it and calls the
decoder with it once the loop has stamped every read of that pass (aiohttp's reader cost a
future, a wake-up and a feed_data per read: 0.8x a bare loop's event rate at C = 64); aiohttp
reads https streams, follows redirects and does every helper request. Either way: one orjson
parse per SSE event, and timeouts are enforced by a single watchdog task that scans the live
streams every few tens of ms, so no timer is armed per event or per read.

Cancellation from outside (Ctrl-C cancelling the run scope) propagates as CancelledError. The
in-flight stream's partial record, with error class `cancelled`, is kept and handed out by
`take_cancelled()`, so the caller can still write it after the scope has unwound.
"""

from __future__ import annotations

import asyncio
import os
from bisect import bisect_right
from collections.abc import Sequence
from time import perf_counter_ns
from typing import Any

import aiohttp
import orjson
from yarl import URL

from loadgen.client.aux_requests import AuxRequests
from loadgen.client.decode import StreamDecoder
from loadgen.client.endpoint import Timeouts, timeout_error
from loadgen.client.errors import (
    ServerUnreachable,
    connect_reason,
    error_message,
    http_error_text,
    not_event_stream,
    one_line,
    read_capped,
    wrong_content,
    wrong_content_text,
)
from loadgen.client.hostload import ServerWait
from loadgen.client.rawhttp import (
    Conn,
    ProtocolError,
    RawPool,
    response_id,
    tcp_rtt_us,
    tcp_state,
)
from loadgen.client.selftime import LoopTicks
from loadgen.records import StreamError, StreamRecord
from loadgen.redact import redact_url
from loadgen.request import StreamRequest, wire_body

# Long prompts and long SSE lines (echo, logprobs) must not hit a small reader limit: another
# tool's 64 KiB default turned a 1.3 s TTFT into a reported 134 s.
READ_BUFSIZE = 4 << 20
AUX_CONNECTIONS = 4
_WATCH_PERIOD_S = 0.05
_WATCH_FLOOR_S = 0.001
DEFAULT_TIMEOUTS = Timeouts()
_CANCELLED = StreamError("cancelled", "cancelled before the stream ended")


class _Live:
    """A stream in flight, as the watchdog sees it. `last_ns` is the last read that brought
    content (0 until the first): comments, role-only and empty events do not reset the idle
    timeout, or a server sending endless `: keep-alive` lines held a stream forever."""

    __slots__ = ("conn", "first_byte_ns", "last_ns", "response_id", "rtt_us", "server_wait_ns",
                 "t_sent", "task", "tcp_first_byte", "timeout", "wait_sent")  # fmt: skip

    def __init__(self, task: asyncio.Task, wait: ServerWait | None) -> None:
        """Made as the stream is sent: its send stamp, and its server's wait for a core then
        (`wait`: read where the server runs on this host)."""
        self.task = task
        self.wait_sent = 0 if wait is None else wait()
        self.t_sent = perf_counter_ns()
        # Its server's wait from the send to the first content chunk, once that came (None
        # until then, and where the server is elsewhere).
        self.server_wait_ns: int | None = None
        self.last_ns = 0
        self.timeout: StreamError | None = None
        self.response_id: str | None = None  # the server's id, from the first body read
        self.rtt_us: int | None = None
        # rawhttp only: the connection of the (last) attempt, with its phase stamps, and the
        # first body byte's arrival with what the kernel said then (0 and None until it came).
        self.conn: Conn | None = None
        self.first_byte_ns = 0
        self.tcp_first_byte: list[int] | None = None


class OpenAIClient(AuxRequests):
    """Async context manager owning one aiohttp session (pool = concurrency) and a watchdog."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        concurrency: int = 64,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
        run_start_ns: int | None = None,
        raw_stream: bool | None = None,
        server_pids: Sequence[int] = (),
    ) -> None:
        self.base_url = base_url.rstrip("/")
        # Which of the run's replicas this client serves (RoutedClient names it), stamped on
        # each record as it is made: a copy of the finished record to add it cost 9 us a
        # request, 7% of a worker's CPU at 16-token answers. None: the run has one server.
        self.replica: int | None = None
        # Its server's processes where the server runs on this host (hostload.local_servers),
        # whose wait for a core each stream reads at its send and first token: opened in the
        # process that streams, when the client is entered, and closed with it.
        self._server_pids = tuple(server_pids)
        self.server_wait: ServerWait | None = None
        # The Ray actor this client streams for (client/ray_pool.py), stamped likewise.
        self.worker: str | None = None
        # How messages and records name the server: a URL's password never leaves the client.
        self.shown_url = redact_url(self.base_url)
        # Streaming POSTs to an http:// target go through rawhttp (one timestamp and one decoder
        # call per socket read, no aiohttp reader machinery); aiohttp serves everything else.
        # LOADGEN_STREAM_READER=aiohttp is the way back to aiohttp's reader, should a server
        # need it, and how bench/ measures both in the same run.
        if raw_stream is None:
            raw_stream = os.environ.get("LOADGEN_STREAM_READER", "raw") != "aiohttp"
        self.raw_stream = raw_stream and URL(self.base_url).scheme == "http"
        self._raw: RawPool | None = None
        self.api_key = api_key
        self.concurrency = concurrency
        self.timeouts = timeouts
        self.run_start_ns = perf_counter_ns() if run_start_ns is None else run_start_ns
        # Whether the target takes continuous_usage_stats: None until one request tells.
        self.continuous_usage: bool | None = None
        self._session: aiohttp.ClientSession | None = None
        # Metrics scrapes, /tokenize and /v1/models get their own small pool: with every stream
        # connection busy they would otherwise queue behind the streams they are observing.
        self._aux_session: aiohttp.ClientSession | None = None
        self._watchdog: asyncio.Task | None = None
        # The loop's lag ticks, shared with every other client on the loop; joined on enter.
        self.ticks: LoopTicks | None = None
        self._live: set[_Live] = set()
        self._cancelled: list[StreamRecord] = []
        # Named to current_task: asked for the running loop, Python 3.11 checks the process's
        # pid with a getpid() each time (4.5% of a worker's CPU at 16-token answers).
        self._loop: asyncio.AbstractEventLoop | None = None

    async def __aenter__(self) -> OpenAIClient:
        self._loop = asyncio.get_running_loop()
        self.ticks = LoopTicks.join(self)
        if self._server_pids:
            self.server_wait = ServerWait(self._server_pids)
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        connector = aiohttp.TCPConnector(limit=self.concurrency, keepalive_timeout=120)
        self._session = aiohttp.ClientSession(
            connector=connector,
            headers=headers,
            read_bufsize=READ_BUFSIZE,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.timeouts.connect_s),
        )
        self._aux_session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=AUX_CONNECTIONS, keepalive_timeout=120),
            headers=headers,
            read_bufsize=READ_BUFSIZE,
        )
        if self.raw_stream:
            self._raw = RawPool(self.base_url, headers, self.timeouts.connect_s)
        self._watchdog = asyncio.create_task(self._watch(), name="loadgen-client-watchdog")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._watchdog:
            self._watchdog.cancel()
            await asyncio.gather(self._watchdog, return_exceptions=True)
        if self.ticks is not None:
            await self.ticks.leave(self)
        for session in (self._session, self._aux_session):
            if session:
                await session.close()
        if self._raw:
            self._raw.close()
        if self.server_wait is not None:
            self.server_wait.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("use OpenAIClient as `async with OpenAIClient(...) as client`")
        return self._session

    def live_counts(self) -> tuple[int, int]:
        """Streams in flight as (awaiting their first content chunk, streaming): for progress
        views only; the watchdog's per-read timestamp is all it reads, so it costs nothing."""
        waiting = sum(live.last_ns == 0 for live in self._live)
        return waiting, len(self._live) - waiting

    def take_cancelled(self) -> list[StreamRecord]:
        """Records of streams cancelled from outside since the last call (class `cancelled`)."""
        out, self._cancelled = self._cancelled, []
        return out

    # ------------------------------------------------------------------ streaming

    async def stream(self, req: StreamRequest) -> StreamRecord:
        """Sends `req` and reads its stream to the end; see the module doc for the contract.

        A 400/422 to a request that asked for continuous_usage_stats, while the target's
        support is unknown, is retried once without it; if that succeeds, the target is
        remembered as not taking it and later requests leave it out."""
        if self.ticks is not None:  # None outside `async with`: `session` then says so
            # Started by the first stream: the parent of worker processes opens a client for
            # /v1/models and /metrics and sends none, and 4,000 wakes a second there took CPU
            # from the process that takes every record.
            self.ticks.start()
        asked = self.continuous_usage is not False
        rec = await self._attempt(req, continuous=asked)
        if asked and self.continuous_usage is None and rec.http_status in (400, 422):
            retry = await self._attempt(req, continuous=False)
            if retry.http_status is not None and retry.http_status < 400:
                self.continuous_usage = False
            return retry
        if asked and rec.http_status is not None and rec.http_status < 400:
            self.continuous_usage = True
        return rec

    async def _attempt(self, req: StreamRequest, *, continuous: bool) -> StreamRecord:
        if self._raw is not None:
            rec = await self._attempt_raw(self._raw, req, continuous=continuous)
            if rec is not None:
                return rec
        return await self._attempt_aiohttp(req, continuous=continuous)

    async def _attempt_raw(
        self, pool: RawPool, req: StreamRequest, *, continuous: bool
    ) -> StreamRecord | None:
        """The stream read through rawhttp; None when the answer is a redirect (aiohttp, which
        follows redirects, takes the request over)."""
        chat = req.messages is not None or req.api == "chat"
        path = "/v1/chat/completions" if chat else "/v1/completions"
        body = orjson.dumps(wire_body(req, continuous=continuous))
        request = pool.request_bytes("POST", path, body, req.id, req.traceparent)
        dec = StreamDecoder(chat=chat, keep_text=req.keep_text, max_tokens=req.max_tokens)
        task = asyncio.current_task(self._loop)
        assert task is not None
        wait = self.server_wait
        live = _Live(task, wait)
        feed = dec.feed

        chunk_ns = dec.chunk_ns

        def sink(chunk: bytes, now: int) -> bool:
            # Taken until the first content chunk or the response id: the per-event path
            # after it pays nothing for the first byte's stamps.
            if not live.last_ns and live.response_id is None:
                if not live.first_byte_ns:
                    live.first_byte_ns = now
                    held = live.conn
                    live.tcp_first_byte = (
                        None if held is None else tcp_state(held.transport, held.info_sock)
                    )
                live.response_id = response_id(chunk)
            done = feed(chunk, now)
            if chunk_ns and chunk_ns[-1] == now:  # this read brought content
                if not live.last_ns and wait is not None:
                    # A server process gone meanwhile takes its count with it: none below 0.
                    live.server_wait_ns = max(0, wait() - live.wait_sent)
                live.last_ns = now
            return done

        status: int | None = None
        t_headers: int | None = None
        error: StreamError | None = None
        conn: Conn | None = None
        whole = False
        self._live.add(live)
        try:
            for retry in (False, True):
                conn = live.conn = None
                try:
                    conn = live.conn = await pool.acquire()
                except (OSError, TimeoutError) as exc:
                    cls = "connect_timeout" if isinstance(exc, TimeoutError) else "connect_error"
                    error = StreamError(cls, f"{self.shown_url}: {connect_reason(exc)}")
                    break
                conn.begin(request, sink)
                try:
                    head = await conn.head  # type: ignore[misc]
                except ConnectionResetError:
                    # A kept-alive connection the server closed while idle: the request never
                    # reached it, so it goes once more on a fresh one.
                    if retry or not conn.reused or conn.received:
                        raise
                    conn.abort()
                    continue
                t_headers, status = head.ns, head.status
                whole = await conn.done  # type: ignore[misc]
                if 300 <= status < 400:
                    return None
                if status >= 400:
                    msg = http_error_text(bytes(conn.collected), head.reason, status)
                    error = StreamError(f"http_{status}", msg)
                elif not head.streams:
                    raw = bytes(conn.collected)
                    error = StreamError(
                        "not_event_stream", wrong_content_text(status, head.ctype, raw)
                    )
                break
        except asyncio.CancelledError:
            whole = False
            if live.timeout is None or task.uncancel() > 0:
                self._cancelled.append(
                    self._record(req, dec, status, live, t_headers, _CANCELLED, raw=True)
                )
                raise
            error = live.timeout
        except (OSError, ProtocolError) as exc:
            error = _closed_early(dec, exc) or error
        finally:
            self._live.discard(live)
            if conn is not None:
                # The first body byte's TCP_INFO holds the RTT its TTFT met; asked again here,
                # a second getsockopt cost 3% of a worker's CPU at 16-token answers.
                first = live.tcp_first_byte
                live.rtt_us = (
                    first[0] if first is not None else tcp_rtt_us(conn.transport, conn.info_sock)
                )
                pool.release(conn, whole)
        error = _stream_error(dec, status, error)
        return self._record(req, dec, status, live, t_headers, error, raw=True)

    async def _attempt_aiohttp(self, req: StreamRequest, *, continuous: bool) -> StreamRecord:
        chat = req.messages is not None or req.api == "chat"
        path = "/v1/chat/completions" if chat else "/v1/completions"
        url = self.base_url + path
        data = orjson.dumps(wire_body(req, continuous=continuous))
        headers = {"X-Request-Id": req.id}
        if req.traceparent is not None:
            headers["traceparent"] = req.traceparent
        dec = StreamDecoder(chat=chat, keep_text=req.keep_text, max_tokens=req.max_tokens)
        task = asyncio.current_task(self._loop)
        assert task is not None
        wait = self.server_wait
        live = _Live(task, wait)
        status: int | None = None
        t_headers: int | None = None
        error: StreamError | None = None
        self._live.add(live)
        try:
            async with self.session.post(url, data=data, headers=headers) as resp:
                t_headers = perf_counter_ns()
                status = resp.status
                if status >= 400:
                    error = StreamError(f"http_{status}", await error_message(resp))
                elif not_event_stream(resp):
                    error = StreamError("not_event_stream", await wrong_content(resp))
                else:
                    read = resp.content.readany
                    feed = dec.feed
                    while True:
                        chunk = await read()
                        if not chunk:
                            break
                        now = perf_counter_ns()
                        if not live.last_ns and live.response_id is None:
                            live.response_id = response_id(chunk)
                        done = feed(chunk, now)
                        if dec.chunk_ns and dec.chunk_ns[-1] == now:
                            if not live.last_ns and wait is not None:
                                live.server_wait_ns = max(0, wait() - live.wait_sent)
                            live.last_ns = now
                        if done:
                            break
                    if resp.connection is not None:
                        live.rtt_us = tcp_rtt_us(resp.connection.transport)
        except asyncio.CancelledError:
            if live.timeout is None or task.uncancel() > 0:
                self._cancelled.append(
                    self._record(req, dec, status, live, t_headers, _CANCELLED, raw=False)
                )
                raise
            error = live.timeout
        except aiohttp.ConnectionTimeoutError as exc:
            error = StreamError("connect_timeout", one_line(exc) or "connect timed out")
        except aiohttp.ClientConnectorError as exc:
            error = StreamError("connect_error", f"{self.shown_url}: {connect_reason(exc)}")
        except (aiohttp.ClientError, OSError) as exc:
            error = _closed_early(dec, exc) or error
        finally:
            self._live.discard(live)
        error = _stream_error(dec, status, error)
        return self._record(req, dec, status, live, t_headers, error, raw=False)

    def _record(
        self,
        req: StreamRequest,
        dec: StreamDecoder,
        status: int | None,
        live: _Live,
        t_headers: int | None,
        error: StreamError | None,
        *,
        raw: bool,
    ) -> StreamRecord:
        now = perf_counter_ns()
        assert self.ticks is not None  # joined on enter, before any stream
        lag, stamps = self.ticks.lag, dec.chunk_ns
        # rawhttp writes the request in the same loop pass that stamps t_sent, so that stamp
        # is exact; aiohttp awaits its connection first, and the loop's lag then delays it.
        sent = live.t_sent
        send_lag = 0 if raw else lag.stall_at(sent)
        ttft_lag = None if not stamps else max(send_lag, lag.lag_at(stamps[0], sent))
        # The reads after the first: its chunks share its stamp, charged just above.
        later = stamps[bisect_right(stamps, stamps[0]) :] if stamps else stamps
        return dec.to_record(
            req,
            run_start_ns=self.run_start_ns,
            http_status=status,
            t_sent=live.t_sent,
            t_headers=t_headers,
            t_end=now,
            error=error,
            loop_lag_max_ns=max(ttft_lag or send_lag, lag.lag_over(later, sent)),
            loop_lag_ttft_ns=ttft_lag,
            rtt_us=live.rtt_us,
            response_id=live.response_id,
            phases=_phase_fields(live, self.run_start_ns),
            replica=self.replica,
            worker=self.worker,
            server_wait_ns=live.server_wait_ns,
        )

    # ------------------------------------------------------------------ watchdog

    async def _watch(self) -> None:
        t = self.timeouts
        # A quarter of the tightest limit: the total one too (left out, a 0.05 s total cut
        # streams at 0.097 s, and one of 0.001 s never fired on a 12.6 ms stream).
        limits = (x / 4 for x in (t.idle_s, t.first_token_s, t.total_s) if x is not None)
        period = max(_WATCH_FLOOR_S, min(_WATCH_PERIOD_S, *limits))
        while True:
            await asyncio.sleep(period)
            now = perf_counter_ns()
            if self._live:
                self._expire_stalled(now)
            # No stamp before the oldest open stream's send is charged again.
            oldest = min((live.t_sent for live in self._live), default=now)
            if self.ticks is not None:
                self.ticks.forget_before(self, oldest)

    def _expire_stalled(self, now: int) -> None:
        t = self.timeouts
        first_byte = _ns(t.first_token_s)
        idle = _ns(t.idle_s)
        total = _ns(t.total_s)
        for live in self._live:
            if live.timeout is not None:
                continue
            if total is not None and now - live.t_sent > total:
                live.timeout = timeout_error("total", t)
            elif first_byte is not None and live.last_ns == 0 and now - live.t_sent > first_byte:
                live.timeout = timeout_error("first_byte", t)
            elif idle is not None and live.last_ns and now - live.last_ns > idle:
                live.timeout = timeout_error("idle", t)
            if live.timeout is not None:
                live.task.cancel()

    # ------------------------------------------------------------------ helpers

    async def warm(self, n: int) -> None:
        """Opens `n` keep-alive connections (n concurrent GET /v1/models, each held until all
        have answered) so connection set-up is not timed as server time. Any HTTP answer
        counts; only an unreachable server raises (ServerUnreachable / ClientError). `n` is
        capped at the pool size: more could never be held open at once."""
        n = min(n, self.concurrency)
        if n < 1:
            return
        if self._raw is not None:
            return await self._warm_raw(self._raw, n)
        arrived = 0
        everyone = asyncio.Event()

        def arrive() -> None:
            nonlocal arrived
            arrived += 1
            if arrived >= n:
                everyone.set()

        url = self.base_url + "/v1/models"

        async def open_one() -> None:
            counted = False
            try:
                async with self.session.get(url, timeout=self._aux_timeout()) as resp:
                    await read_capped(resp, "GET /v1/models")
                    counted = True
                    arrive()
                    await everyone.wait()
            except (aiohttp.ClientError, TimeoutError) as exc:
                if not counted:
                    arrive()
                raise self._aux_error("GET", "/v1/models", exc) from None

        results = await asyncio.gather(*(open_one() for _ in range(n)), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r

    async def _warm_raw(self, pool: RawPool, n: int) -> None:
        """warm() for the rawhttp pool: n connections each answer GET /v1/models, then all go
        to the pool together (released one by one, they would be reused, not multiplied)."""
        request = pool.request_bytes("GET", "/v1/models", b"", None)

        async def open_one() -> Conn:
            try:
                conn = await pool.acquire()
            except (OSError, TimeoutError) as exc:
                raise ServerUnreachable(
                    f"cannot connect to {self.shown_url}: {connect_reason(exc)}"
                ) from None
            conn.begin(request, None)
            try:
                await asyncio.wait_for(conn.head, self.timeouts.meta_s)  # type: ignore[arg-type]
                await asyncio.wait_for(conn.done, self.timeouts.meta_s)  # type: ignore[arg-type]
                return conn
            except BaseException as exc:
                conn.abort()
                if isinstance(exc, OSError | ProtocolError | TimeoutError):
                    raise self._aux_error("GET", "/v1/models", exc) from None
                raise

        results = await asyncio.gather(*(open_one() for _ in range(n)), return_exceptions=True)
        for r in results:
            if isinstance(r, Conn):
                pool.release(r, True)
        for r in results:
            if isinstance(r, BaseException):
                raise r


def _closed_early(dec: StreamDecoder, exc: BaseException) -> StreamError | None:
    """The connection dropped with `exc` before the stream's end (None: it had ended)."""
    if dec.finished:
        return None
    why = one_line(exc) or type(exc).__name__
    return StreamError("connection_closed", f"after {dec.events} events: {why}")


def _stream_error(
    dec: StreamDecoder, status: int | None, error: StreamError | None
) -> StreamError | None:
    """A stream's error, either reader's: the decoder's, else `error`, else a 2xx stream that
    ended without [DONE] (cut inside an event, or between two)."""
    if error is None and status is not None and status < 400 and not dec.finished:
        where = "inside an event" if dec.truncated else f"after {dec.events} events"
        error = StreamError("connection_closed", f"stream ended {where} without [DONE]")
    return dec.error or error


def _phase_fields(live: _Live, run_start_ns: int) -> dict[str, Any]:
    """The record's HTTP phase fields (records.py) from a rawhttp stream's stamps; empty for
    aiohttp's reader, which has none (the record's defaults, None, stand)."""
    conn = live.conn
    if conn is None:
        return {}

    def rel(t: int) -> int | None:
        return t - run_start_ns if t else None

    return {
        "conn_reused": conn.reused,
        # A kept-alive connection was made for an earlier stream: no connect phase in this one.
        "t_connected_ns": None if conn.reused else rel(conn.connected_ns),
        "t_written_ns": rel(conn.written_ns),
        "t_first_byte_ns": rel(live.first_byte_ns),
        "tcp_first_byte": live.tcp_first_byte,
    }


def _ns(seconds: float | None) -> int | None:
    """A timeout in ns; None stays None (no limit)."""
    return None if seconds is None else int(seconds * 1e9)
