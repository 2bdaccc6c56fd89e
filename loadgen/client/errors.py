"""Error classes and messages of the client: one stable name per failure, one line each."""

from __future__ import annotations

import os
import socket
from typing import Any

import aiohttp
import orjson

from loadgen.messages import one_line

ERROR_CLASSES = ("connect_error", "connect_timeout", "http_<status>", "first_byte_timeout",
                 "idle_timeout", "total_timeout", "connection_closed", "malformed_sse",
                 "server_error_event", "cancelled", "line_too_long", "bad_usage",
                 "runaway_stream", "not_event_stream")  # fmt: skip


# Every answer that is not a stream (/v1/models, /metrics, /tokenize, error bodies), counted
# after decompression: a gzip-bombed /v1/models reached 3.5 GB and an endless /metrics 3.4 GB
# before this. 32 MiB holds /tokenize of a 2^20-token prompt (~7 MB of ids) with room.
BODY_CAP = 32 << 20


class ClientError(Exception):
    """A helper request (models, tokenize, metrics, warm-up) failed; the message is one line."""


class ServerUnreachable(ClientError):
    pass


class HTTPStatusError(ClientError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class BodyTooLarge(ClientError, OSError):
    """An OSError too, so the launcher's urllib reads treat it as the failed read it is."""


async def read_capped(resp: aiohttp.ClientResponse, what: str, cap: int = BODY_CAP) -> bytes:
    """The whole (decompressed) body of a non-stream answer; BodyTooLarge past `cap` bytes,
    having read no more than that (aiohttp inflates in bounded pieces as it is read)."""
    buf = bytearray()
    while chunk := await resp.content.read(1 << 16):
        buf += chunk
        if len(buf) > cap:
            raise BodyTooLarge(f"{what}: body over {cap} bytes (decompressed); not read further")
    return bytes(buf)


def read_capped_sync(resp: Any, what: str, cap: int = BODY_CAP) -> bytes:
    """read_capped for a urllib response (the launcher's readiness and read-back requests)."""
    raw = resp.read(cap + 1)
    if len(raw) > cap:
        raise BodyTooLarge(f"{what}: body over {cap} bytes; not read further")
    return raw


async def error_message(resp: aiohttp.ClientResponse) -> str:
    try:
        raw = await resp.content.read(1 << 16)
    except (aiohttp.ClientError, OSError):
        raw = b""
    return http_error_text(raw, resp.reason, resp.status)


def http_error_text(raw: bytes, reason: str | None, status: int) -> str:
    """The one-line message of an HTTP error answer with body `raw`."""
    return error_text(raw) or reason or f"HTTP {status}"


def not_event_stream(resp: aiohttp.ClientResponse) -> bool:
    """A success answer whose stated Content-Type is not SSE (a login page, a JSON reply to a
    stream request). A missing Content-Type is let through: the SSE parser judges the body."""
    ctype = resp.headers.get("Content-Type")
    return ctype is not None and not ctype.lower().lstrip().startswith("text/event-stream")


async def wrong_content(resp: aiohttp.ClientResponse) -> str:
    """What came instead of an event stream: its Content-Type and first bytes."""
    try:
        raw = await resp.content.read(120)
    except (aiohttp.ClientError, OSError):
        raw = b""
    return wrong_content_text(resp.status, resp.headers.get("Content-Type"), raw)


def wrong_content_text(status: int, ctype: str | None, raw: bytes) -> str:
    """What came instead of an event stream, from its status, Content-Type and first bytes."""
    return f"HTTP {status} with Content-Type {ctype}, not text/event-stream; body {raw[:120]!r}"


def error_text(raw: bytes) -> str:
    """The message of an error body: vLLM `message`, OpenAI `error.message`, FastAPI `detail`."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return one_line(raw.decode("utf-8", "replace"))
    if isinstance(obj, dict):
        err = obj.get("error")
        for v in (err.get("message") if isinstance(err, dict) else err, obj.get("message"),
                  obj.get("detail")):  # fmt: skip
            if v:
                return one_line(v if isinstance(v, str) else orjson.dumps(v).decode())
    return one_line(raw.decode("utf-8", "replace"))


def parse_json(method: str, path: str, raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ClientError(f"{method} {path} returned no JSON: {raw[:80]!r}") from None


def connect_reason(exc: BaseException) -> str:
    if isinstance(exc, aiohttp.ConnectionTimeoutError | TimeoutError):
        return "connect timed out"
    # aiohttp's connector errors are OSErrors themselves, holding the socket's own as os_error.
    err = getattr(exc, "os_error", None) or exc
    if isinstance(err, socket.gaierror):
        # getaddrinfo's codes are its own (EAI_*, negative): os.strerror reads -2 as
        # "Unknown error -2" where the resolver said "Name or service not known".
        return f"host name lookup failed ({err.strerror or one_line(err)})"
    if isinstance(err, OSError) and err.errno:
        return os.strerror(err.errno)  # the same words under uvloop and asyncio
    return one_line(exc)
