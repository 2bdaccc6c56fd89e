"""Hostile servers: a small aiohttp app on 127.0.0.1 per wrong thing a server can do, and one
stream against it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web

from loadgen.client.endpoint import Timeouts
from loadgen.client.openai import OpenAIClient
from loadgen.request import StreamRequest

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


SSE = {"Content-Type": "text/event-stream"}


def req(max_tokens: int = 4) -> StreamRequest:
    return StreamRequest(id="h0", model="m", prompt="p", max_tokens=max_tokens)


def event(obj: object) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def token(i: int, usage: dict | None = None) -> bytes:
    obj: dict = {"choices": [{"index": 0, "text": f"t{i}", "finish_reason": None}]}
    if usage is not None:
        obj["usage"] = usage
    return event(obj)


class Hostile:
    """One handler for /v1/completions (and /v1/models) on an ephemeral loopback port."""

    def __init__(self, handler: Handler) -> None:
        self.app = web.Application()
        self.app.router.add_post("/v1/completions", handler)
        self.app.router.add_get("/v1/models", self._models)
        self.runner = web.AppRunner(self.app)
        self.url = ""

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "m"}]})

    async def __aenter__(self) -> Hostile:
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.runner.cleanup()


async def one_stream(handler: Handler, max_tokens: int = 4, **timeouts: float):
    async with (
        Hostile(handler) as srv,
        OpenAIClient(srv.url, concurrency=1, timeouts=Timeouts(**timeouts)) as client,
    ):
        return await client.stream(req(max_tokens))
