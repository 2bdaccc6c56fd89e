"""Where a client points and how long it waits: the server root from flags or the environment,
and the stream timeouts with the error each one writes into a record."""

from __future__ import annotations

import os
from dataclasses import dataclass

from yarl import URL

from loadgen.messages import one_line
from loadgen.records import StreamError
from loadgen.redact import redact_url


@dataclass(frozen=True)
class Timeouts:
    """Seconds, None for no limit; one set for the scenario's `timeouts:`, the command line and
    the client. connect: TCP connect; first_token: send -> first content chunk (it covers the
    whole prefill, and a 72k prefill takes ~65 s); idle: the longest gap between content
    chunks; total: send -> end. Only content counts: SSE comments, role-only or empty events
    reset nothing. meta: the whole of a request beside the streams (/v1/models and the
    warm-up's, /tokenize, /metrics, /health): borrowed from idle (120 s), a server that
    accepted and never answered held probe-cache that long before it failed."""

    connect_s: float | None = 10.0
    first_token_s: float | None = 900.0
    idle_s: float | None = 120.0
    total_s: float | None = None
    meta_s: float | None = 10.0


def timeout_error(kind: str, t: Timeouts) -> StreamError:
    """The record's error when timeout `kind` (total, first_byte, idle) of `t` expired."""
    if kind == "total":
        return StreamError("total_timeout", f"stream exceeded {t.total_s} s")
    if kind == "first_byte":
        return StreamError("first_byte_timeout", f"no content within {t.first_token_s} s of send")
    return StreamError("idle_timeout", f"no content for {t.idle_s} s mid-stream")


def resolve_target(base_url: str | None, api_key: str | None) -> tuple[str, str | None]:
    """The server root URL (no trailing /v1) and API key: flags first, then OPENAI_BASE_URL /
    OPENAI_API_KEY. Raises ValueError with a one-line message when no usable URL is given."""
    raw = (base_url or os.environ.get("OPENAI_BASE_URL") or "").strip()
    if not raw:
        raise ValueError("no server given: pass --base-url URL or set OPENAI_BASE_URL")
    if "://" not in raw:
        raw = "http://" + raw
    expect = "an http(s) URL like http://127.0.0.1:8000"
    shown = redact_url(raw)
    try:
        url = URL(raw)
        url.port  # noqa: B018 - yarl checks the port's range only when it is read
    except ValueError as exc:
        raise ValueError(f"base URL {shown!r} is not {expect} ({one_line(exc).lower()})") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError(f"base URL {shown!r} is not {expect}")
    path = url.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[:-3]
    root = str(url.with_path(path or "/").with_query(None).with_fragment(None)).rstrip("/")
    key = api_key or os.environ.get("OPENAI_API_KEY") or None
    return root, key
