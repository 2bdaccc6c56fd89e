"""Hostile servers (issue #10 items 4, 10, 11): each a small aiohttp app on 127.0.0.1 that does
one wrong thing. The client must end every stream within its bounds, hold bounded memory, and
say in the record what the server did."""

from __future__ import annotations

import asyncio
import threading
import tracemalloc

import pytest
from aiohttp import web
from click.testing import CliRunner

from loadgen.cli import main
from loadgen.client.sse import DEFAULT_MAX_EVENT_BYTES

from support.hostile import SSE, Hostile, one_stream, token

MB = 1 << 20


async def forever(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers=SSE)
    await resp.prepare(request)
    i = 0
    try:
        while True:  # never [DONE], never a finish_reason
            await resp.write(token(i))
            i += 1
            await asyncio.sleep(0.001)
    except ConnectionError:
        return resp  # the client hung up: the point of the test


async def test_a_stream_that_never_ends_stops_at_the_total_timeout() -> None:
    rec = await one_stream(forever, max_tokens=100_000, total_s=0.5)
    assert rec.status == "error" and rec.error is not None
    assert rec.error.cls == "total_timeout"


async def test_more_tokens_than_asked_are_flagged_in_the_record() -> None:
    async def six_for_four(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers=SSE)
        await resp.prepare(request)
        for i in range(6):
            await resp.write(token(i))
        await resp.write(b'data: {"choices":[],"usage":{"completion_tokens":6}}\n\n')
        await resp.write(b"data: [DONE]\n\n")
        return resp

    rec = await one_stream(six_for_four, max_tokens=4)
    assert (rec.completion_tokens, rec.max_tokens, rec.over_max_tokens) == (6, 4, 2)


async def test_a_runaway_stream_is_cut_so_its_record_stays_bounded() -> None:
    rec = await one_stream(forever, max_tokens=4)
    assert rec.error is not None and rec.error.cls == "runaway_stream"
    # Cut at the first read past 4 x 4 + 64 = 80 chunks; that read may hold a few more events.
    assert 80 < rec.chunks < 160
    assert rec.over_max_tokens > 0


async def test_a_fifty_megabyte_line_is_dropped_with_bounded_memory() -> None:
    piece = b"x" * MB

    async def huge_line(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers=SSE)
        await resp.prepare(request)
        await resp.write(token(0))
        await resp.write(b'data: {"choices":[{"index":0,"text":"')
        for _ in range(50):
            await resp.write(piece)
        await resp.write(b'"}]}\n\n')
        await resp.write(token(1))
        await resp.write(b'data: {"choices":[{"index":0,"text":"e","finish_reason":"length"}]}\n\n')
        await resp.write(b"data: [DONE]\n\n")
        return resp

    tracemalloc.start()
    try:
        rec = await one_stream(huge_line)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert rec.error is not None and rec.error.cls == "line_too_long"
    assert str(DEFAULT_MAX_EVENT_BYTES) in rec.error.message
    assert rec.chunks == 3  # the events either side of the giant line still count
    # Client and server share this process: bound both well below one copy of the line.
    assert peak < 40 * MB, f"peak {peak / MB:.0f} MB"


async def test_negative_completion_tokens_are_an_error_not_ok() -> None:
    async def negative(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers=SSE)
        await resp.prepare(request)
        await resp.write(token(0))
        await resp.write(
            b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":-5}}\n\n'
        )
        await resp.write(b"data: [DONE]\n\n")
        return resp

    rec = await one_stream(negative)
    assert rec.status == "error" and rec.error is not None
    assert rec.error.cls == "bad_usage"
    assert "-5" in rec.error.message


@pytest.mark.parametrize(
    ("ctype", "body", "seen"),
    [
        ("text/html", b"<html><body>Login required</body></html>", "<html><body>Login"),
        ("application/json", b'{"id": "x", "choices": []}', '{"id": "x"'),
    ],
)
async def test_a_200_that_is_not_an_event_stream_says_what_it_was(
    ctype: str, body: bytes, seen: str
) -> None:
    async def wrong(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type=ctype)

    rec = await one_stream(wrong)
    assert rec.status == "error" and rec.error is not None
    assert rec.error.cls == "not_event_stream"
    assert ctype in rec.error.message and seen in rec.error.message
    assert rec.http_status == 200


def test_request_total_timeout_flag_ends_a_forever_stream() -> None:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    srv = Hostile(forever)
    asyncio.run_coroutine_threadsafe(srv.__aenter__(), loop).result(10)
    try:
        res = CliRunner().invoke(
            main,
            [
                "request",
                "--base-url",
                srv.url,
                "--model",
                "m",
                "--max-tokens",
                "100000",
                "--total-timeout",
                "0.5",
            ],
        )
    finally:
        asyncio.run_coroutine_threadsafe(srv.__aexit__(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
    assert res.exit_code == 4, res.output  # the run ended with a failed stream
    assert "total_timeout x1" in res.output
