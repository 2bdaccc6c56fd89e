"""rawhttp: the streaming POST's own HTTP/1.1 reader. Unit tests feed a Conn byte slices as a
socket would (split at every position); integration tests run the client against raw loopback
servers that do what aiohttp's test server never does (stale keep-alive, redirects, no length)."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from loadgen.client import rawhttp
from loadgen.client.endpoint import Timeouts
from loadgen.client.openai import OpenAIClient
from loadgen.client.rawhttp import Conn, ProtocolError, RawPool, tcp_rtt_us
from loadgen.records import StreamRecord
from loadgen.request import StreamRequest

from support.pacedserver import PacedConfig, PacedServer

EVENTS = b'data: {"choices":[{"text":"a"}]}\n\ndata: [DONE]\n\n'


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.aborted = False

    def write(self, data: bytes) -> None:  # type: ignore[override]
        self.written += data

    def abort(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.aborted


def chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def armed(streaming: bool = True) -> tuple[Conn, list[bytes]]:
    got: list[bytes] = []
    conn = Conn()
    conn.connection_made(FakeTransport())

    def sink(chunk: bytes, now: int) -> bool:
        got.append(chunk)
        return False

    conn.begin(b"POST / HTTP/1.1\r\n\r\n", sink if streaming else None)
    return conn, got


SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)


async def test_a_chunked_stream_split_anywhere_gives_the_same_body_and_ends_reusable() -> None:
    wire = SSE_HEAD + chunked(EVENTS[:20], EVENTS[20:], b"x" * 300)
    for cut in range(1, len(wire)):
        conn, got = armed()
        conn.data_received(wire[:cut])
        conn.data_received(wire[cut:])
        assert await conn.done is True
        assert b"".join(got) == EVENTS + b"x" * 300
        assert conn.reusable


async def test_one_read_holding_many_chunks_is_one_sink_call() -> None:
    conn, got = armed()
    conn.data_received(SSE_HEAD + chunked(*(b"data: %d\n\n" % i for i in range(50))))
    assert await conn.done is True
    assert len(got) == 1 and got[0].count(b"data: ") == 50


async def test_reads_of_whole_chunks_give_what_the_general_loop_gives(monkeypatch) -> None:
    """whole_chunks takes a read of whole chunks only; whatever it declines (a cut chunk, a
    CRLF inside data, data that looks like framing, extensions, trailers) goes to the loop:
    both readers give the same bodies, end and reuse for every split into two reads."""
    wires = [
        chunked(EVENTS[:20], EVENTS[20:], b"x" * 300),
        chunked(b"a\r\nb", b"\r\n", b"2\r\nab\r\n0\r\n\r\n", b"c"),
        chunked(b"data: 1\n\n") + b"junk",
        chunked(b"ab") + b"3\r\nabc\r\n",  # a chunk after the last one: never body
        b"5;name=v\r\nhello\r\n3\r\nabc\r\n0\r\nX-Trailer: 1\r\n\r\n",
        b"0\r\n\r\n",
    ]

    async def read(wire: bytes, cut: int) -> tuple[list[bytes], bool | None, bool]:
        conn, got = armed()
        for part in (SSE_HEAD + wire[:cut], wire[cut:]):
            if part and not conn.done.done():  # type: ignore[union-attr]
                conn.data_received(part)
        done = conn.done.result() if conn.done.done() else None  # type: ignore[union-attr]
        return got, done, conn.reusable

    for wire in wires:
        for cut in range(len(wire) + 1):
            fast = await read(wire, cut)
            with monkeypatch.context() as m:
                m.setattr(rawhttp, "whole_chunks", lambda data: None)
                assert await read(wire, cut) == fast, (wire, cut)
    assert rawhttp.whole_chunks(chunked(b"ab", b"c")) == (b"abc", True)
    assert rawhttp.whole_chunks(b"2\r\nab\r\n") == (b"ab", False)
    assert rawhttp.whole_chunks(b"2\r\na\r\n\r\n") is None


async def test_chunk_extensions_and_trailers_are_skipped() -> None:
    conn, got = armed()
    conn.data_received(SSE_HEAD + b"5;name=v\r\nhello\r\n0\r\nX-Trailer: 1\r\n")
    assert not conn.done.done()  # type: ignore[union-attr]
    conn.data_received(b"\r\n")
    assert await conn.done is True and got == [b"hello"]


async def test_100_continue_is_skipped_and_the_real_head_counts() -> None:
    conn, _ = armed()
    conn.data_received(b"HTTP/1.1 100 Continue\r\n\r\n" + SSE_HEAD)
    head = await conn.head  # type: ignore[misc]
    assert (head.status, head.ctype, head.streams) == (200, "text/event-stream", True)


async def test_an_error_answer_is_collected_not_streamed() -> None:
    conn, got = armed()
    body = b'{"error":{"message":"nope"}}'
    conn.data_received(b"HTTP/1.1 429 Too Many\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    head = await conn.head  # type: ignore[misc]
    assert (head.status, head.reason, head.streams) == (429, "Too Many", False)
    assert await conn.done is True
    assert (got, bytes(conn.collected), conn.reusable) == ([], body, True)


async def test_a_body_until_close_ends_at_eof_and_is_not_reused() -> None:
    conn, got = armed()
    conn.data_received(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + EVENTS)
    conn.connection_lost(None)
    assert await conn.done is True
    assert (got, conn.reusable) == ([EVENTS], False)


async def test_a_reset_mid_body_fails_the_exchange() -> None:
    conn, _ = armed()
    conn.data_received(SSE_HEAD + b"a\r\ndata: 1\n\n")
    conn.connection_lost(ConnectionResetError("reset by peer"))
    with pytest.raises(ConnectionResetError, match="mid-body: reset by peer"):
        await conn.done  # type: ignore[misc]


async def test_garbage_instead_of_a_status_line_is_a_protocol_error() -> None:
    conn, _ = armed()
    conn.data_received(b"SSH-2.0-OpenSSH\r\n\r\n")
    with pytest.raises(ProtocolError, match="status line"):
        await conn.head  # type: ignore[misc]
    assert conn.transport.aborted  # type: ignore[union-attr]


async def test_a_bad_chunk_size_is_a_protocol_error() -> None:
    conn, _ = armed()
    conn.data_received(SSE_HEAD + b"zz\r\n")
    with pytest.raises(ProtocolError, match="bad chunk-size line"):
        await conn.done  # type: ignore[misc]


def _conns_in_one_pass(intake: rawhttp.Intake | None, clock: list[int]) -> list[Conn]:
    """Two armed Conns whose sinks each take 1 ms of `clock` (the decode) and note the stamp
    they were handed, each with a whole answer read in one loop pass."""
    conns = []
    for _ in range(2):
        conn = Conn(intake)
        conn.connection_made(FakeTransport())
        stamps: list[int] = []

        def sink(chunk: bytes, now: int, stamps: list[int] = stamps) -> bool:
            stamps.append(now)
            clock[0] += 1_000_000
            return False

        conn.begin(b"POST / HTTP/1.1\r\n\r\n", sink)
        conn.stamps = stamps  # type: ignore[attr-defined]
        conns.append(conn)
    for conn in conns:  # as the loop delivers one poll's reads, one after the other
        conn.data_received(SSE_HEAD + chunked(EVENTS))
    return conns


async def test_a_pools_reads_are_all_stamped_before_any_is_decoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [0]
    monkeypatch.setattr(rawhttp, "perf_counter_ns", lambda: clock[0])
    conns = _conns_in_one_pass(rawhttp.Intake(asyncio.get_running_loop()), clock)
    assert [c.stamps for c in conns] == [[], []]  # type: ignore[attr-defined]
    assert [await c.done for c in conns] == [True, True]  # type: ignore[misc]
    assert [c.stamps for c in conns] == [[0], [0]]  # type: ignore[attr-defined]
    # Taken in as each came, the second read waited for the first's decode.
    clock[0] = 0
    conns = _conns_in_one_pass(None, clock)
    assert [c.stamps for c in conns] == [[0], [1_000_000]]  # type: ignore[attr-defined]


async def test_a_connection_end_is_taken_in_after_the_reads_before_it() -> None:
    got: list[bytes] = []
    intake = rawhttp.Intake(asyncio.get_running_loop())
    conn = Conn(intake)
    conn.connection_made(FakeTransport())
    conn.begin(b"POST / HTTP/1.1\r\n\r\n", lambda chunk, now: bool(got.append(chunk)))
    conn.data_received(SSE_HEAD + b"a\r\ndata: 1\n\n")
    conn.connection_lost(ConnectionResetError("reset by peer"))
    assert conn.closed and got == []  # no exchange may begin on it, nothing taken in yet
    with pytest.raises(ConnectionResetError, match="mid-body: reset by peer"):
        await conn.done  # type: ignore[misc]
    assert got == [b"data: 1\n\n"] and not intake.waiting


async def test_a_read_its_owner_gave_up_on_before_it_was_taken_in_is_dropped() -> None:
    intake = rawhttp.Intake(asyncio.get_running_loop())
    conn = Conn(intake)
    conn.connection_made(FakeTransport())
    conn.begin(b"POST / HTTP/1.1\r\n\r\n", None)
    conn.data_received(b"SSH-2.0-OpenSSH\r\n\r\n")  # a protocol error, once taken in
    conn.abort()  # the stream's task was cancelled in the same pass
    await asyncio.sleep(0)
    assert not intake.waiting and conn.head is not None and not conn.head.done()


def test_tcp_info_is_read_through_the_dup_while_the_transport_closes() -> None:
    # A server that closes right after a one-read answer: the transport is closing before
    # the pool takes the read in, and the first byte's TCP_INFO comes from the dup.
    async def main() -> None:
        srv = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        async with srv:
            loop = asyncio.get_running_loop()
            _, conn = await loop.create_connection(Conn, "127.0.0.1", port)
            assert conn.transport is not None and conn.info_sock is not None
            conn.transport.close()
            assert conn.transport.is_closing()
            state = rawhttp.tcp_state(conn.transport, conn.info_sock)
            assert state is not None and state[0] > 0
            assert rawhttp.tcp_state(conn.transport) is None
            while not conn.closed:
                await asyncio.sleep(0.001)
            assert conn.info_sock is None  # closed with the connection's end

    uvloop.run(main())


async def _lost_connection() -> Conn:
    """A Conn whose server closed it and whose connection_lost has run: under uvloop its
    transport's handle is closed and its socket's fd is -1."""
    srv = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    async with srv:
        _, conn = await asyncio.get_running_loop().create_connection(Conn, "127.0.0.1", port)
        while not conn.closed:
            await asyncio.sleep(0.001)
    return conn


def test_a_connection_the_server_closed_fails_its_exchange_instead_of_raising() -> None:
    async def main() -> None:
        conn = await _lost_connection()
        conn.begin(b"GET /v1/models HTTP/1.1\r\n\r\n", None)
        with pytest.raises(ConnectionResetError, match="before the request was sent"):
            await conn.head  # type: ignore[misc]

    uvloop.run(main())


def test_the_rtt_is_read_while_the_connection_is_open_and_is_none_once_it_closed() -> None:
    async def main() -> None:
        srv, url, _ = await serve(SSE_HEAD + chunked(STREAM_BODY), close_after=True)
        async with srv:
            pool = RawPool(url, {}, 1.0)
            conn = await pool.acquire()
            rtts: list[int | None] = []

            def sink(_body: bytes, _now: int) -> bool:
                # As the client does: at the first body read, the server's close already
                # seen by the transport when the answer and the end came in one poll.
                rtts.append(tcp_rtt_us(conn.transport, conn.info_sock))
                return False

            conn.begin(pool.request_bytes("POST", "/v1/completions", b"{}", None), sink)
            assert (await conn.head).status == 200  # type: ignore[misc]
            await conn.done  # type: ignore[misc]
            assert rtts and rtts[0] is not None and rtts[0] > 0
            while not conn.closed:  # the server closes after its answer
                await asyncio.sleep(0.001)
            assert tcp_rtt_us(conn.transport) is None
            pool.release(conn, True)

    uvloop.run(main())


def test_tcp_info_is_read_through_the_connections_own_socket_which_never_holds_it_open() -> None:
    # The dup a Conn reads TCP_INFO through keeps the kernel's connection while it is open:
    # the server sees the client go when the Conn aborts, and when the server closes first the
    # dup is closed with the transport.
    async def main() -> None:
        ended: asyncio.Queue[bytes] = asyncio.Queue()

        async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            await r.readuntil(b"\r\n\r\n{}")
            w.write(SSE_HEAD + chunked(STREAM_BODY))
            if await r.read(1) == b"":  # the client closed
                await ended.put(b"eof")
            w.close()

        srv = await asyncio.start_server(handle, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}"
        async with srv:
            pool = RawPool(url, {}, 1.0)
            conn = await pool.acquire()
            assert conn.info_sock is not None
            assert conn.info_sock.fileno() != conn.transport.get_extra_info("socket").fileno()
            conn.begin(pool.request_bytes("POST", "/v1/completions", b"{}", None), None)
            assert await conn.done is True  # type: ignore[misc]
            own = tcp_rtt_us(conn.transport, conn.info_sock)
            assert own is not None and own > 0
            conn.abort()
            assert conn.info_sock is None
            assert await asyncio.wait_for(ended.get(), 10) == b"eof"

            srv2, url2, _ = await serve(SSE_HEAD + chunked(STREAM_BODY), close_after=True)
            async with srv2:
                pool2 = RawPool(url2, {}, 1.0)
                conn2 = await pool2.acquire()
                conn2.begin(pool2.request_bytes("POST", "/v1/completions", b"{}", None), None)
                await conn2.done  # type: ignore[misc]
                while not conn2.closed:  # the server closes after its answer
                    await asyncio.sleep(0.001)
                assert conn2.info_sock is None
                assert tcp_rtt_us(conn2.transport, None) is None

    uvloop.run(main())


def test_request_bytes_carry_the_base_path_host_and_length() -> None:
    pool = RawPool("http://127.0.0.1:8000/prefix/", {"Authorization": "Bearer k"}, 1.0)
    wire = pool.request_bytes("POST", "/v1/completions", b"{}", "r1")
    assert wire == (
        b"POST /prefix/v1/completions HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n"
        b"Authorization: Bearer k\r\nX-Request-Id: r1\r\nContent-Length: 2\r\n\r\n{}"
    )


# ------------------------------------------------------------------ raw loopback servers

STREAM_BODY = (
    b'data: {"choices":[{"text":"a","finish_reason":null}]}\n\n'
    b'data: {"choices":[{"text":"b","finish_reason":"length"}],'
    b'"usage":{"prompt_tokens":1,"completion_tokens":2}}\n\n'
    b"data: [DONE]\n\n"
)


async def serve(answer: bytes, close_after: bool) -> tuple[asyncio.Server, str, list[int]]:
    """A server answering every request on a connection with `answer`; closing it after each
    answer when `close_after` (without saying so: a keep-alive the server drops)."""
    accepted: list[int] = []

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        accepted.append(1)
        try:
            while True:
                head = await r.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await r.readexactly(length)
                w.write(answer)
                await w.drain()
                if close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        w.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    return srv, f"http://127.0.0.1:{port}", accepted


def req(i: int) -> StreamRequest:
    return StreamRequest(id=f"r{i}", model="m", prompt="p", max_tokens=2)


async def test_streams_reuse_one_kept_alive_connection() -> None:
    answer = SSE_HEAD + chunked(STREAM_BODY)
    srv, url, accepted = await serve(answer, close_after=False)
    async with srv, OpenAIClient(url, concurrency=1) as client:
        recs = [await client.stream(req(i)) for i in range(3)]
    assert [(r.status, r.completion_tokens, r.chunks) for r in recs] == [("ok", 2, 2)] * 3
    assert len(accepted) == 1


async def test_a_keep_alive_the_server_dropped_is_replaced_not_an_error() -> None:
    answer = SSE_HEAD + chunked(STREAM_BODY)
    srv, url, accepted = await serve(answer, close_after=True)
    async with srv, OpenAIClient(url, concurrency=1) as client:
        recs = [await client.stream(req(i)) for i in range(3)]
    assert [(r.status, r.completion_tokens) for r in recs] == [("ok", 2)] * 3
    assert len(accepted) == 3


async def test_a_length_delimited_stream_is_read_like_a_chunked_one() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n"
    srv, url, _ = await serve(head % len(STREAM_BODY) + STREAM_BODY, close_after=False)
    async with srv, OpenAIClient(url, concurrency=1) as client:
        rec = await client.stream(req(0))
    assert (rec.status, rec.completion_tokens, rec.chunks, rec.finish_reason) == (
        "ok",
        2,
        2,
        "length",
    )


@pytest.mark.parametrize("raw", [True, False])
@pytest.mark.parametrize(
    ("tail", "where"), [(b"", "after 1 events"), (b"data: {", "inside an event")]
)
async def test_a_whole_response_cut_before_its_end_is_a_closed_stream_in_either_reader(
    raw: bool, tail: bytes, where: str
) -> None:
    # A whole HTTP body (chunked, ended cleanly) whose stream stops before its last event.
    first_event = STREAM_BODY.split(b"\n\n")[0] + b"\n\n"
    srv, url, _ = await serve(SSE_HEAD + chunked(first_event + tail), close_after=False)
    async with srv, OpenAIClient(url, concurrency=1, raw_stream=raw) as client:
        rec = await client.stream(req(0))
    assert rec.error is not None and rec.http_status == 200
    assert (rec.error.cls, rec.error.message) == (
        "connection_closed", f"stream ended {where} without [DONE]"
    )  # fmt: skip


async def test_a_redirect_is_followed_by_the_aiohttp_path() -> None:
    target, target_url, _ = await serve(SSE_HEAD + chunked(STREAM_BODY), close_after=False)
    moved = b"HTTP/1.1 307 Temporary Redirect\r\nLocation: %s/v1/completions\r\n"
    moved += b"Content-Length: 0\r\n\r\n"
    srv, url, _ = await serve(moved % target_url.encode(), close_after=False)
    async with target, srv, OpenAIClient(url, concurrency=1) as client:
        rec = await client.stream(req(0))
    assert (rec.status, rec.completion_tokens, rec.http_status) == ("ok", 2, 200)


# ------------------------------------------------------------------ both readers agree

FAULTS = ["http_401", "http_500", "close_mid", "bad_json", "stall", "error_event", None]


def fault_req(i: int, fault: str | None) -> StreamRequest:
    extra = {"fault": fault} if fault else {}
    return StreamRequest(id=f"f{i}", model="m", prompt="p", max_tokens=8, extra_body=extra)


def outcome(rec: StreamRecord) -> tuple:
    err = rec.error
    return (rec.status, err and err.cls, err and err.message, rec.http_status, rec.chunks,
            rec.completion_tokens, rec.events, rec.parse_errors, rec.finish_reason)  # fmt: skip


async def test_rawhttp_and_aiohttp_readers_write_the_same_record_for_every_fault() -> None:
    recs: dict[bool, list[StreamRecord]] = {}
    async with PacedServer(PacedConfig(ttft_s=0.01, gap_s=0.005)) as srv:
        for raw in (True, False):
            timeouts = Timeouts(idle_s=0.3)
            async with OpenAIClient(srv.url, timeouts=timeouts, raw_stream=raw) as client:
                assert client.raw_stream is raw
                reqs = [fault_req(i, f) for i, f in enumerate(FAULTS)]
                recs[raw] = await asyncio.gather(*(client.stream(r) for r in reqs))
    raw_out, aio_out = ([outcome(r) for r in recs[k]] for k in (True, False))
    # The reset's wording is each reader's own; its class and event count are not.
    for a, b in zip(raw_out, aio_out, strict=True):
        if a[1] == "connection_closed":
            assert b[1] == "connection_closed"
            assert a[2].split(":")[0] == b[2].split(":")[0] == "after 2 events"
            a, b = a[:2] + a[3:], b[:2] + b[3:]
        assert a == b
    assert [o[1] for o in raw_out] == ["http_401", "http_500", "connection_closed",
                                       "malformed_sse", "idle_timeout", "server_error_event",
                                       None]  # fmt: skip


def test_the_aiohttp_reader_is_chosen_by_env_and_for_https(monkeypatch) -> None:
    assert OpenAIClient("http://127.0.0.1:1").raw_stream is True
    assert OpenAIClient("https://127.0.0.1:1").raw_stream is False
    monkeypatch.setenv("LOADGEN_STREAM_READER", "aiohttp")
    assert OpenAIClient("http://127.0.0.1:1").raw_stream is False
