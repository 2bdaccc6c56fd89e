"""The client's requests beside the streams (/v1/models, /tokenize, /metrics): one capped
read each (a gzip-bombed /v1/models once reached 3.5 GB), one error line each."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson

from loadgen.client.endpoint import Timeouts
from loadgen.client.errors import (
    ClientError,
    HTTPStatusError,
    ServerUnreachable,
    connect_reason,
    error_text,
    one_line,
    parse_json,
    read_capped,
)
from loadgen.redact import redact_text


class AuxRequests:
    """OpenAIClient's non-stream requests, over its auxiliary session."""

    base_url: str
    shown_url: str
    timeouts: Timeouts
    _aux_session: aiohttp.ClientSession | None

    async def get_json(self, path: str) -> Any:
        return parse_json("GET", path, await self._aux("GET", path, None))

    async def post_json(self, path: str, body: dict) -> Any:
        return parse_json("POST", path, await self._aux("POST", path, body))

    async def get_text(self, path: str) -> str:
        return (await self._aux("GET", path, None)).decode("utf-8", "replace")

    def _aux_timeout(self) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(
            total=self.timeouts.meta_s, sock_connect=self.timeouts.connect_s
        )

    async def _aux(self, method: str, path: str, body: dict | None) -> bytes:
        data = None if body is None else orjson.dumps(body)
        try:
            if self._aux_session is None:
                raise RuntimeError("use OpenAIClient as `async with OpenAIClient(...) as client`")
            async with self._aux_session.request(
                method, self.base_url + path, data=data, timeout=self._aux_timeout()
            ) as resp:
                raw = await read_capped(resp, f"{method} {path}")
                if resp.status >= 400:
                    msg = error_text(raw) or resp.reason or ""
                    raise HTTPStatusError(
                        resp.status, f"{method} {path} returned HTTP {resp.status}: {msg}"
                    )
                return raw
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise self._aux_error(method, path, exc) from None

    def _aux_error(self, method: str, path: str, exc: BaseException) -> ClientError:
        if isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError):
            return ServerUnreachable(f"cannot connect to {self.shown_url}: {connect_reason(exc)}")
        if isinstance(exc, TimeoutError):
            return ClientError(f"{method} {path} timed out after {self.timeouts.meta_s} s")
        # aiohttp's own words may carry the request's URL, userinfo and all.
        why = redact_text(one_line(exc)) or type(exc).__name__
        return ClientError(f"{method} {path} failed: {why}")
