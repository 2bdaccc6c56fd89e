"""The streaming POST's own HTTP/1.1 reader: one asyncio.Protocol per keep-alive connection.

aiohttp spends most of a fast stream in its per-read machinery (a StreamReader, a future and a
task wake-up per read, a feed_data per chunk). Here each socket read is stamped ONCE as the
loop delivers it, and the Conn parses the response head and the chunked / length-delimited /
until-close body itself and hands the read's body bytes, with that stamp, to the stream's sink
(the decoder): the awaiting coroutine wakes only for the head and for the end.

A pool's reads are taken in by its Intake once the loop has stamped every socket its poll woke:
decoded as they came, each read's stamp waited for the decoding of every read the loop delivered
before it in that pass. On the 2-core build machine (bench/ceiling.py, 1 worker, C=16, 16-token
answers, 3 alternating pairs) the TTFT p50 error against firehose's log went from +0.80-0.82 ms
to +0.61-0.64, its p99 from +2.34-2.43 to +1.46-1.63. The price is a loop pass: uvloop runs
ready callbacks only before its poll, so the `done` the take-in sets wakes its task after one
more poll. A saturated client pays for it: 2-5% more CPU a request for the client alone (4
pairs: 68-75 us against 71-78), 6-12% for 2 workers at C=32 to 96 there, and on a 16-core host
at 12 workers (C=120) 9-32% fewer requests/s, 4 pairs (bench/ceiling.md, host R). Waking the
task instead on a read that looks like the answer's end, right behind the take-in, gave no rate
back on a 16-core host and read later: tried and dropped (bench/ceiling.md, host S).

Plain http:// only; the client keeps aiohttp for https, helper requests and redirects. Answers
that are not the stream (HTTP errors, a 200 that is not text/event-stream, 3xx) are collected up
to ERROR_BODY_CAP bytes for their message instead of being streamed.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Callable
from time import perf_counter_ns

from yarl import URL

ERROR_BODY_CAP = 1 << 16
_HEAD_CAP = 1 << 16
_SIZE_LINE_CAP = 1 << 10
# body modes
_CHUNKED, _LENGTH, _UNTIL_CLOSE = 0, 1, 2

Sink = Callable[[bytes, int], bool]
# Descriptors a stream connection holds: its socket and the dup TCP_INFO is read through.
FDS_PER_CONNECTION = 2
# struct tcp_info (linux/tcp.h) at the offsets its fields have held since Linux 4.19 (8 bytes of
# u8 fields, then u32s from rto on): rtt (us) at 68, bytes_acked (u64, the SYN's byte
# included) at 120, notsent_bytes at 144, bytes_sent and bytes_retrans (u64) at 200 and 208.
_TCPI_RTT = struct.Struct("<I")
_TCPI_RTT_OFFSET = 68
_TCPI_ACKED, _TCPI_NOTSENT, _TCPI_SENT = (struct.Struct(f) for f in ("<Q", "<I", "<QQ"))
_TCPI_LEN = 216
_TCP_INFO = getattr(socket, "TCP_INFO", None)
_ID_KEY = b'"id":'
_LAST_CHUNK = [b"0", b"", b""]  # `0` CRLF CRLF split on CRLF: the 0 chunk with no trailer


def info_socket(transport: asyncio.BaseTransport) -> socket.socket | None:
    """A socket of the caller's own on the connection, a dup of its descriptor, to read
    TCP_INFO through; None where the platform or the transport has none. uvloop's transport
    hands out a pseudo-socket whose every getsockopt builds a socket object on the descriptor
    and drops it: a stream's two reads of TCP_INFO cost 26 us of a 160 us request (one worker,
    16-token answers); through a dup made once a connection, 2. The dup holds the connection
    open in the kernel, so its owner closes it before the transport's own (Conn.abort) or
    once that is gone (connection_lost)."""
    sock = transport.get_extra_info("socket") if _TCP_INFO is not None else None
    if sock is None:
        return None
    try:
        return socket.fromfd(sock.fileno(), sock.family, sock.type, sock.proto)
    except (OSError, ValueError):
        return None


def tcp_state(
    transport: asyncio.Transport | None, sock: socket.socket | None = None
) -> list[int] | None:
    """What the kernel says of the connection now: [smoothed RTT (us), request bytes sent but
    not yet acknowledged, bytes not yet sent (the kernel's tcpi_notsent_bytes plus what the
    transport still buffers)]; None where the platform or the transport does not say. A kernel
    older than 4.19 gives the RTT only: then both byte counts are -1. `sock`: the connection's
    info_socket, else the transport's own is asked for."""
    if transport is None or _TCP_INFO is None:
        return None
    if sock is None:
        if transport.is_closing():
            # A closed uvloop transport's socket has fd -1: getsockopt raised ValueError out
            # of the stream whose server had just been killed (issue 32). The info socket
            # (a dup) holds the kernel's connection until the Conn takes in its end, so a
            # server that closes right after a one-read answer still gives its first byte's.
            return None
        sock = transport.get_extra_info("socket")
        if sock is None:
            return None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, _TCPI_LEN)
    except OSError:
        return None
    if len(info) < _TCPI_RTT_OFFSET + 4:
        return None
    rtt = _TCPI_RTT.unpack_from(info, _TCPI_RTT_OFFSET)[0]
    if len(info) < _TCPI_LEN:
        return [rtt, -1, -1]
    sent, retrans = _TCPI_SENT.unpack_from(info, 200)
    acked = _TCPI_ACKED.unpack_from(info, 120)[0] - 1  # less the SYN
    buffered = transport.get_write_buffer_size()
    notsent = _TCPI_NOTSENT.unpack_from(info, 144)[0] + buffered
    return [rtt, max(0, sent - retrans - acked), notsent]


def tcp_rtt_us(
    transport: asyncio.Transport | None, sock: socket.socket | None = None
) -> int | None:
    """The kernel's smoothed round-trip time of the connection (TCP_INFO tcpi_rtt, us): the
    network's share of a TTFT; None where the platform or the transport does not say."""
    state = tcp_state(transport, sock)
    return None if state is None else state[0]


def response_id(body: bytes) -> str | None:
    """The server's response id (`"id":"cmpl-..."`) in the first body read, to join a record
    with the server's own log; None when that read carries none."""
    i = body.find(_ID_KEY)
    if i < 0:
        return None
    start = body.find(b'"', i + len(_ID_KEY))
    end = body.find(b'"', start + 1)
    if start < 0 or end < 0 or end - start > 200:
        return None
    return body[start + 1 : end].decode("utf-8", "replace")


def whole_chunks(data: bytes) -> tuple[bytes, bool] | None:
    """The payload of a read that starts at a chunk and holds whole chunks only (size line,
    data, CRLF each; the last may be the 0 chunk with no trailer), and whether that ended the
    body; None for any other read, which Conn._dechunk's loop takes. A CRLF inside a chunk's
    data cuts its part short of its size, so a read whose every size matches its part's length
    is what it looks like. A fast server's 16-token answer is one such read of 19 chunks: the
    loop took 110k instructions for it, this 66k (5% of the client's instructions a request)."""
    parts = data.split(b"\r\n")
    ended = parts[-3:] == _LAST_CHUNK
    if parts[-1] or len(parts) < 3:
        return None  # a chunk cut by the read's end
    parts = parts[: -3 if ended else -1]
    sizes, datas = parts[::2], parts[1::2]
    try:
        lengths = [int(size, 16) for size in sizes]
    except ValueError:
        return None  # an extension, or not a size at all: the loop says which
    if 0 in lengths or lengths != list(map(len, datas)):
        return None  # a chunk's data holds a CRLF, or the 0 chunk has a trailer
    return (datas[0] if len(datas) == 1 else b"".join(datas)), ended


class Intake:
    """A pool's reads, each stamped as the loop delivers it and taken in by its connection once
    the loop has run every callback of that poll (one call_soon a pass), in the order they
    came."""

    __slots__ = ("_loop", "_pending")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._pending: list[tuple[Conn, bytes, int]] = []  # (connection, bytes read, stamp)

    @property
    def waiting(self) -> bool:
        """Whether anything stamped is still to be taken in."""
        return bool(self._pending)

    def put(self, conn: Conn, data: bytes, now: int) -> None:
        if not self._pending:
            self._loop.call_soon(self._take)
        self._pending.append((conn, data, now))

    def _take(self) -> None:
        pending, self._pending = self._pending, []
        for conn, data, now in pending:
            conn.take(data, now)


class ProtocolError(Exception):
    """The server's answer is not HTTP/1.1 this reader can follow; the message is one line."""


class Head:
    __slots__ = ("ctype", "ns", "reason", "status")

    def __init__(self, status: int, reason: str, ctype: str | None, ns: int) -> None:
        self.status = status
        self.reason = reason
        self.ctype = ctype
        self.ns = ns

    @property
    def streams(self) -> bool:
        """A success answer whose body is (or may be: no Content-Type) an event stream."""
        ctype = self.ctype
        ok_type = ctype is None or ctype.lower().lstrip().startswith("text/event-stream")
        return 200 <= self.status < 300 and ok_type


class Conn(asyncio.Protocol):
    """One connection; one exchange at a time. `begin` arms it and sends the request; `head`
    then `done` resolve as the answer arrives (done's result: the body was read to its end).
    `intake`: its pool's, through which it takes in its reads; None: each as it comes."""

    def __init__(self, intake: Intake | None = None) -> None:
        self.intake = intake
        self.transport: asyncio.Transport | None = None
        # The connection's loop, kept: asked for each exchange, Python 3.11 pays a getpid().
        self._loop: asyncio.AbstractEventLoop | None = None
        self.info_sock: socket.socket | None = None  # info_socket(): TCP_INFO read through it
        self.closed = False
        self.aborted = False
        self.reused = False
        # Phase edges, once per connection and once per exchange (perf_counter ns): when the
        # connection was made and when `begin` handed the request to the kernel.
        self.connected_ns = 0
        self.written_ns = 0
        self.received = 0  # bytes of the current exchange
        self.head: asyncio.Future[Head] | None = None
        self.done: asyncio.Future[bool] | None = None
        self.sink: Sink | None = None
        self.collected = bytearray()
        self.reusable = False
        self._buf = b""  # head bytes so far, or a partial chunk-size line
        self._in_body = False
        self._streaming = False
        self._mode = _CHUNKED
        self._rem = 0  # data bytes left in the current chunk / body
        self._skip = 0  # CRLF bytes after a chunk's data still to skip
        self._trailer = False

    # -------------------------------------------------------------- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.connected_ns = perf_counter_ns()
        self._loop = asyncio.get_running_loop()
        self.transport = transport  # type: ignore[assignment]
        self.info_sock = info_socket(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        # Closed at once (no exchange may begin on it), lost after any read still to take in:
        # the loop runs its callbacks in the order they were scheduled, the intake's first.
        self.closed = True
        if self.intake is not None and self.intake.waiting:
            assert self._loop is not None  # set by connection_made, which comes first
            self._loop.call_soon(self.lost, exc)
        else:
            self.lost(exc)

    def lost(self, exc: Exception | None) -> None:
        """The connection's end, taken in: the exchange under way fails or ends with it."""
        self._close_info()
        why = str(exc) if exc else "server closed the connection"
        if self.done is None or self.done.done():
            return
        if not self._in_body:
            self._raise(ConnectionResetError(f"before the response head: {why}"))
        elif self._mode == _UNTIL_CLOSE or not self._streaming:
            self.done.set_result(exc is None and self._mode == _UNTIL_CLOSE)
        else:
            self._raise(ConnectionResetError(f"mid-body: {why}"))

    def data_received(self, data: bytes) -> None:
        if self.intake is None:
            self.take(data, perf_counter_ns())
        else:
            self.intake.put(self, data, perf_counter_ns())

    def take(self, data: bytes, now: int) -> None:
        """Takes in one socket read, stamped `now` as it came."""
        if self.aborted:
            return  # read before its owner gave the connection up, taken in after
        self.received += len(data)
        if self.done is None or self.done.done():
            # Bytes nobody asked for (after the answer, or while idle): never reuse this one.
            self.reusable = False
            if self.done is None:
                self.abort()
            return
        try:
            if not self._in_body:
                data = self._take_head(data, now)
                if not self._in_body:
                    return
            self._take_body(data, now)
        except ProtocolError as exc:
            self._fail(exc)

    # -------------------------------------------------------------- exchange

    def begin(self, request: bytes, sink: Sink | None) -> None:
        loop = self._loop
        assert loop is not None  # set by connection_made, which comes before any exchange
        self.head = loop.create_future()
        self.done = loop.create_future()
        self.sink = sink
        self.collected = bytearray()
        self.reusable = False
        self.received = 0
        self.written_ns = 0
        self._buf = b""
        self._in_body = self._trailer = False
        self._rem = self._skip = 0
        if self.closed:
            # The server went while this connection waited to be used: uvloop raises
            # RuntimeError on a write to its closed handle, out of a warm-up (issue 32).
            self._raise(ConnectionResetError("before the request was sent: connection closed"))
            return
        assert self.transport is not None
        self.transport.write(request)
        self.written_ns = perf_counter_ns()

    def abort(self) -> None:
        self.closed = self.aborted = True
        # The dup first: while it is open the kernel keeps the connection, abort or not.
        self._close_info()
        if self.transport is not None:
            self.transport.abort()

    def _close_info(self) -> None:
        if self.info_sock is not None:
            self.info_sock.close()
            self.info_sock = None

    def _fail(self, exc: Exception) -> None:
        self._raise(exc)
        self.abort()

    def _raise(self, exc: Exception) -> None:
        # Only the future the owner awaits next gets the error: an exception set on a future
        # nobody awaits is logged as never retrieved.
        if self.head is not None and not self.head.done():
            self.head.set_exception(exc)
            if self.done is not None:
                self.done.cancel()
        elif self.done is not None and not self.done.done():
            self.done.set_exception(exc)

    def _finish(self) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_result(True)

    def _take_head(self, data: bytes, now: int) -> bytes:
        buf = self._buf + data if self._buf else data
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > _HEAD_CAP:
                raise ProtocolError(f"response head over {_HEAD_CAP} bytes")
            self._buf = buf
            return b""
        self._buf = b""
        lines = buf[:end].decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise ProtocolError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
        status = int(parts[1])
        rest = buf[end + 4 :]
        if 100 <= status < 200:  # 100 Continue and friends: the real head follows
            return self._take_head(rest, now) if rest else b""
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                raise ProtocolError(f"not a header line: {line[:80]!r}")
            headers[name.strip().lower()] = value.strip()
        head = Head(status, parts[2] if len(parts) > 2 else "", headers.get("content-type"), now)
        keep = parts[0] == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._mode = _CHUNKED
        elif "content-length" in headers:
            try:
                self._rem = int(headers["content-length"])
            except ValueError:
                raise ProtocolError("bad Content-Length") from None
            self._mode = _LENGTH
        else:
            self._mode = _UNTIL_CLOSE
            keep = False
        self.reusable = keep
        self._in_body = True
        self._streaming = head.streams and self.sink is not None
        assert self.head is not None
        self.head.set_result(head)
        if (self._mode == _LENGTH and self._rem == 0) or status in (204, 304):
            self._finish()
        return rest

    def _take_body(self, data: bytes, now: int) -> None:
        if not data:
            return
        if self._mode == _CHUNKED:
            body, ended = self._dechunk(data)
        elif self._mode == _LENGTH:
            body = data[: self._rem]
            self._rem -= len(body)
            ended = self._rem == 0
        else:
            body, ended = data, False
        if body:
            if self._streaming:
                assert self.sink is not None
                if self.sink(body, now):
                    self._streaming = False
                    self.sink = None
                    if not ended:
                        self.reusable = False  # the rest of this body is never read
                        self._finish()
            elif len(self.collected) < ERROR_BODY_CAP:
                self.collected += body[: ERROR_BODY_CAP - len(self.collected)]
                if len(self.collected) >= ERROR_BODY_CAP and not ended:
                    self.reusable = False
                    self._finish()
        if ended:
            self._finish()

    def _dechunk(self, data: bytes) -> tuple[bytes, bool]:
        """The chunk payload bytes in `data` and whether the terminating chunk was among them."""
        if self._buf:
            data = self._buf + data
            self._buf = b""
        if self._trailer:
            return b"", self._end_trailer(data)
        if not (self._rem or self._skip):
            whole = whole_chunks(data)
            if whole is not None:
                self._trailer = whole[1]  # as the loop below leaves a body it ended
                return whole
        out: list[bytes] = []
        pos, n = 0, len(data)
        rem, skip = self._rem, self._skip
        find = data.find
        while pos < n:
            if rem:
                end = pos + rem
                if end > n:
                    out.append(data[pos:])
                    rem = end - n
                    break
                out.append(data[pos:end])
                pos, rem, skip = end, 0, 2
            if skip:
                k = min(skip, n - pos)
                pos += k
                skip -= k
                continue
            eol = find(b"\r\n", pos)
            if eol < 0:
                if n - pos > _SIZE_LINE_CAP:
                    raise ProtocolError("chunk-size line too long")
                self._buf = data[pos:]
                break
            line = data[pos:eol]
            try:
                size = int(line, 16)
            except ValueError:
                try:
                    size = int(line.split(b";", 1)[0], 16)
                except ValueError:
                    raise ProtocolError(f"bad chunk-size line {line[:40]!r}") from None
            pos = eol + 2
            if size == 0:
                self._rem = self._skip = 0
                self._trailer = True
                return b"".join(out), self._end_trailer(data[pos:])
            end = pos + size
            if end + 2 <= n:  # the usual case: the whole chunk and its CRLF are in this read
                out.append(data[pos:end])
                pos = end + 2
            else:
                rem = size
        self._rem, self._skip = rem, skip
        return (out[0] if len(out) == 1 else b"".join(out)), False

    def _end_trailer(self, data: bytes) -> bool:
        """Consumes trailer lines up to the empty one; True once it has come."""
        buf = self._buf + data if self._buf else data
        if buf.startswith(b"\r\n") or buf.find(b"\r\n\r\n") >= 0:
            self._buf = b""
            return True
        if len(buf) > _HEAD_CAP:
            raise ProtocolError("chunked trailer too long")
        self._buf = buf
        return False


class RawPool:
    """Idle keep-alive connections to one http:// origin, newest first."""

    def __init__(self, base_url: str, headers: dict[str, str], connect_s: float | None) -> None:
        url = URL(base_url)
        self.host = url.host or "127.0.0.1"
        self.port = url.port or 80
        self.prefix = url.path.rstrip("/")
        host = f"[{self.host}]" if ":" in self.host else self.host
        fixed = {"Host": f"{host}:{self.port}", **headers}
        self._fixed = "".join(f"{k}: {v}\r\n" for k, v in fixed.items())
        self.connect_s = connect_s
        self._idle: list[Conn] = []
        self._intake: Intake | None = None

    def request_bytes(
        self,
        method: str,
        path: str,
        body: bytes,
        request_id: str | None,
        traceparent: str | None = None,
    ) -> bytes:
        rid = "" if request_id is None else f"X-Request-Id: {request_id}\r\n"
        if traceparent is not None:
            rid += f"traceparent: {traceparent}\r\n"
        head = f"{method} {self.prefix}{path} HTTP/1.1\r\n{self._fixed}{rid}"
        return f"{head}Content-Length: {len(body)}\r\n\r\n".encode("latin-1") + body

    async def acquire(self) -> Conn:
        """An idle connection, or a new one (raises OSError / TimeoutError on connect)."""
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                conn.reused = True
                return conn
        loop = asyncio.get_running_loop()
        if self._intake is None:
            self._intake = Intake(loop)
        intake = self._intake
        _, conn = await asyncio.wait_for(
            loop.create_connection(lambda: Conn(intake), self.host, self.port), self.connect_s
        )
        return conn

    def release(self, conn: Conn, ok: bool) -> None:
        """Back to the pool when its answer was read whole and it may be kept; else closed."""
        if ok and conn.reusable and not conn.closed:
            conn.head = conn.done = None
            conn.sink = None
            self._idle.append(conn)
        else:
            conn.abort()

    def close(self) -> None:
        for conn in self._idle:
            conn.abort()
        self._idle.clear()
