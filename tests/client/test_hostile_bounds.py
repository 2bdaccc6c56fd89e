"""Hostile servers, round 2 (issue #20): timeouts count content, not bytes; every non-stream
body is capped after decompression; usage no server can mean is `bad_usage`. Each server is a
small aiohttp app on 127.0.0.1 (tests/support/hostile.py's `Hostile`); memory cases run the
client in a subprocess under an address-space limit, so a regression fails instead of
swapping."""

from __future__ import annotations

import asyncio
import sys
import zlib

import orjson
import pytest
from aiohttp import web

from loadgen.client.endpoint import Timeouts
from loadgen.client.errors import BODY_CAP
from loadgen.client.openai import OpenAIClient

from support.hostile import SSE, Hostile, event, one_stream, req, token

# Python, aiohttp and uvloop map ~0.5 GB of address space; the bodies below are endless (they
# reached 3.5 GB and 3.4 GB before the cap).
MEMORY_CAP = 3 << 29  # 1.5 GiB
MB = 1 << 20


async def _stalls_after_one_token(request: web.Request, filler: bytes) -> web.StreamResponse:
    resp = web.StreamResponse(headers=SSE)
    await resp.prepare(request)
    await resp.write(token(0))
    try:
        while True:  # bytes, but never content again
            await resp.write(filler)
            await asyncio.sleep(0.005)
    except ConnectionError:
        return resp


KEEP_ALIVE = b": keep-alive\n\n"
EMPTY_TEXT = event({"choices": [{"index": 0, "text": "", "finish_reason": None}]})


@pytest.mark.parametrize("raw", [True, False], ids=["rawhttp", "aiohttp"])
@pytest.mark.parametrize("filler", [KEEP_ALIVE, EMPTY_TEXT], ids=["comments", "empty-events"])
async def test_bytes_without_content_do_not_reset_the_idle_timeout(
    raw: bool, filler: bytes
) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return await _stalls_after_one_token(request, filler)

    async with (
        Hostile(handler) as srv,
        OpenAIClient(
            srv.url, concurrency=1, timeouts=Timeouts(idle_s=0.3), raw_stream=raw
        ) as client,
    ):
        rec = await asyncio.wait_for(client.stream(req(max_tokens=8)), 10)
    assert rec.error is not None and rec.error.cls == "idle_timeout"
    assert rec.error.message == "no content for 0.3 s mid-stream"
    assert rec.chunks == 1 and rec.events >= 1


async def test_comments_before_any_content_end_at_the_first_byte_timeout() -> None:
    async def only_comments(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers=SSE)
        await resp.prepare(request)
        try:
            while True:
                await resp.write(KEEP_ALIVE)
                await asyncio.sleep(0.005)
        except ConnectionError:
            return resp

    rec = await asyncio.wait_for(one_stream(only_comments, first_token_s=0.3, idle_s=60), 10)
    assert rec.error is not None and rec.error.cls == "first_byte_timeout"
    assert rec.error.message == "no content within 0.3 s of send"


async def test_comments_between_timely_tokens_stay_ok() -> None:
    async def chatty(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers=SSE)
        await resp.prepare(request)
        for i in range(4):
            await resp.write(KEEP_ALIVE + token(i))
        await resp.write(event({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}))
        await resp.write(b"data: [DONE]\n\n")
        return resp

    rec = await asyncio.wait_for(one_stream(chatty, idle_s=5), 10)
    assert (rec.status, rec.chunks, rec.finish_reason) == ("ok", 4, "length")


def _usage_stream(usage: dict) -> web.StreamResponse:
    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers=SSE)
        await resp.prepare(request)
        await resp.write(token(0))
        await resp.write(b'data: {"choices":[],"usage":' + orjson.dumps(usage) + b"}\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    return handler  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("usage", "message"),
    [
        ({"prompt_tokens": -1, "completion_tokens": 1}, "usage.prompt_tokens is -1"),
        ({"prompt_tokens": 8, "completion_tokens": 10**12},
         "usage.completion_tokens is 1000000000000 for max_tokens 16"),
        ({"prompt_tokens": 8, "completion_tokens": 1, "prompt_tokens_details":
          {"cached_tokens": 9}}, "usage cached_tokens 9 is not within prompt_tokens 8"),
    ],
)  # fmt: skip
async def test_usage_no_server_can_mean_is_bad_usage_with_its_numbers_kept(
    usage: dict, message: str
) -> None:
    rec = await one_stream(_usage_stream(usage), max_tokens=16)
    assert rec.status == "error" and rec.error is not None
    assert (rec.error.cls, rec.error.message) == ("bad_usage", message)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    assert (rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens) == (
        usage["prompt_tokens"], usage["completion_tokens"], cached,
    )  # fmt: skip


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": 8, "completion_tokens": 20},  # 4 over: over_max_tokens, still ok
        {"prompt_tokens": 8, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 8}},
        {"prompt_tokens": 0, "completion_tokens": 1},
    ],
)
async def test_plausible_usage_stays_ok(usage: dict) -> None:
    rec = await one_stream(_usage_stream(usage), max_tokens=16)
    assert rec.status == "ok", rec.error
    assert rec.over_max_tokens == max(0, usage["completion_tokens"] - 16)


# ------------------------------------------------------------------ capped bodies

_CLIENT = """
import asyncio, resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({cap}, {cap}))
from loadgen.client.errors import ClientError
from loadgen.client.openai import OpenAIClient

async def main():
    async with OpenAIClient(sys.argv[1], concurrency=1) as client:
        try:
            await client.{call}
        except ClientError as exc:
            print("ClientError:", exc)
        else:
            print("read it all")

asyncio.run(main())
"""


async def _endless_gzip(request: web.Request) -> web.StreamResponse:
    """A gzip body that inflates without end: 1 KB on the wire per MB inflated."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(MB)
    first = c.compress(zeros) + c.flush(zlib.Z_SYNC_FLUSH)
    again = c.compress(zeros) + c.flush(zlib.Z_SYNC_FLUSH)
    resp = web.StreamResponse(headers={"Content-Type": "application/json",
                                       "Content-Encoding": "gzip"})  # fmt: skip
    await resp.prepare(request)
    try:
        await resp.write(first)
        while True:
            await resp.write(again * 64)
    except ConnectionError:
        return resp


async def _endless_text(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
    await resp.prepare(request)
    line = b"vllm:num_requests_running 0\n" * 4096
    try:
        while True:
            await resp.write(line)
    except ConnectionError:
        return resp


async def _small_models(request: web.Request) -> web.Response:
    return web.json_response({"data": [{"id": "m"}]})


@pytest.mark.parametrize(
    ("handler", "call", "what"),
    [
        (_endless_gzip, 'get_json("/v1/models")', "GET /v1/models"),
        (_endless_text, 'get_text("/metrics")', "GET /metrics"),
        (_small_models, 'get_json("/v1/models")', None),
    ],
    ids=["gzip-bomb-models", "endless-metrics", "small-models"],
)
async def test_every_non_stream_body_is_capped_under_a_memory_limit(
    handler: object, call: str, what: str | None
) -> None:
    hostile = Hostile(_small_models)
    hostile.app = web.Application()  # only the two GETs, each answered by `handler`
    hostile.app.router.add_get("/v1/models", handler)  # type: ignore[arg-type]
    hostile.app.router.add_get("/metrics", handler)  # type: ignore[arg-type]
    hostile.runner = web.AppRunner(hostile.app)
    async with hostile as srv:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _CLIENT.format(cap=MEMORY_CAP, call=call), srv.url,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()[-2000:]
    if what is None:
        assert out.decode().strip() == "read it all"
    else:
        assert out.decode().strip() == (
            f"ClientError: {what}: body over {BODY_CAP} bytes (decompressed); not read further"
        )
