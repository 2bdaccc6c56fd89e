"""A paced fake OpenAI server for tests: known TTFT, known gap, k tokens per chunk, and faults.

Wire format as vLLM: completions `choices[0].text`, chat `delta.content` after a role-only first
delta, `usage` on every chunk with `stream_options.continuous_usage_stats`, a final usage chunk
with `choices: []` with `include_usage`, then `data: [DONE]`. It logs its own true send time of
every chunk (perf_counter ns, the client's clock) so a test compares against the truth, not the
nominal schedule.

Faults, chosen per request by a body field `"fault"` (StreamRequest.extra_body) or by arrival
index (`PacedConfig.faults`): http_401 / http_429 / http_500 (JSON error bodies), close_mid
(connection closed after 2 chunks), bad_json (chunk 2 is not JSON), stall (silent after 2 chunks
until `stall_s` or shutdown), error_event (an `{"error": ...}` event, then [DONE]), long_line
(chunk 2 is one 4 MiB SSE line carrying one token).

Tokenizer (for /tokenize and usage.prompt_tokens): one token per word, two for words longer
than 7 characters, so sizing by bisection has something to do.

Use `async with PacedServer(cfg) as srv` inside a test's loop, `ThreadedPacedServer(cfg)` from
sync code (CLI tests), or run `python tests/support/pacedserver.py --port N` for manual smoke
tests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import threading
from dataclasses import dataclass, field
from time import perf_counter_ns
from typing import Any

import orjson
from aiohttp import web

WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")
ERROR_BODIES = {
    401: {"error": {"message": "Invalid API key", "type": "invalid_request_error"}},
    429: {"object": "error", "message": "Too many requests", "type": "RateLimitError"},
    500: {"object": "error", "message": "Engine died", "type": "InternalServerError"},
}


@dataclass(frozen=True)
class PacedConfig:
    ttft_s: float = 0.05
    gap_s: float = 0.02
    tokens_per_chunk: int = 1
    model: str = "paced"
    reject_continuous: bool = False
    empty_text: bool = False  # tokens decode to "" (random-weight models do this)
    tokenize: str | None = "vllm"  # "vllm" | "llamacpp" | None (no /tokenize)
    models: bool = True  # False: no /v1/models (a proxy that lists none answers 404)
    faults: dict[int, str] = field(default_factory=dict)  # arrival index -> fault name
    stall_s: float = 30.0
    events_per_write: int = 1  # > 1 only in zero-delay mode, to stream fast
    # After each first token the server's thread holds the GIL this long (ThreadedPacedServer:
    # a client sharing the process is frozen, as one short of a core is).
    hold_gil_s: float = 0.0
    # How long a completion's handler waits before it reads the request (a server whose
    # request reads are late: its accept queue, a busy loop, a core it waits for).
    read_delay_s: float = 0.0


@dataclass
class Served:
    """What the server did for one request: the truth a test compares against."""

    request_id: str
    index: int
    body: dict[str, Any]
    fault: str | None
    arrival_ns: int
    peer: tuple | None = None  # the client's (host, port): which connection carried it
    send_ns: list[int] = field(default_factory=list)  # token chunks only
    tokens: list[int] = field(default_factory=list)
    completed: bool = False


def count_tokens(text: str) -> int:
    return sum(2 if len(w) > 7 else 1 for w in text.split())


class PacedServer:
    def __init__(self, config: PacedConfig | None = None) -> None:
        self.config = config or PacedConfig()
        self.served: list[Served] = []
        self.rejected = 0
        self.arrivals = 0
        self.model_peers: list[tuple] = []  # connections that asked for /v1/models
        self.url = ""
        self._stop: asyncio.Event | None = None
        self._runner: web.AppRunner | None = None
        self._handlers: set[asyncio.Task] = set()

    def by_id(self, request_id: str) -> Served:
        return next(s for s in self.served if s.request_id == request_id)

    async def __aenter__(self) -> PacedServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self, port: int = 0) -> None:
        self._stop = asyncio.Event()
        app = web.Application(client_max_size=64 << 20)  # 100k-token prompts
        app.router.add_post("/v1/completions", self._complete)
        app.router.add_post("/v1/chat/completions", self._complete)
        if self.config.models:
            app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        if self.config.tokenize:
            app.router.add_post("/tokenize", self._tokenize)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        host, bound = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{bound}"

    async def stop(self) -> None:
        if self._stop:
            self._stop.set()
        for task in self._handlers:
            task.cancel()  # a stream still waiting out its TTFT would hold shutdown up
        if self._runner:
            await self._runner.cleanup()

    async def _models(self, request: web.Request) -> web.Response:
        self.model_peers.append(_peer(request))
        return web.json_response({"object": "list", "data": [{"id": self.config.model}]})

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    async def _tokenize(self, request: web.Request) -> web.Response:
        body = await request.json(loads=orjson.loads)
        if self.config.tokenize == "llamacpp":
            if "content" not in body:
                return web.json_response({"error": {"message": "content required"}}, status=400)
            return web.json_response({"tokens": list(range(count_tokens(body["content"])))})
        if "prompt" not in body:
            return web.json_response({"object": "error", "message": "prompt required"}, status=400)
        n = count_tokens(body["prompt"])
        return web.json_response({"count": n, "max_model_len": 8192, "tokens": list(range(n))})

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        if self.config.read_delay_s:
            await asyncio.sleep(self.config.read_delay_s)
        arrival = perf_counter_ns()
        body = await request.json(loads=orjson.loads)
        cfg = self.config
        opts = body.get("stream_options") or {}
        if cfg.reject_continuous and opts.get("continuous_usage_stats"):
            self.rejected += 1
            msg = "continuous_usage_stats is not supported"
            return web.json_response({"object": "error", "message": msg}, status=400)
        index = self.arrivals
        self.arrivals += 1
        fault = body.get("fault") or cfg.faults.get(index)
        rid = request.headers.get("X-Request-Id", str(index))
        served = Served(rid, index, body, fault, arrival, _peer(request))
        self.served.append(served)
        if fault and fault.startswith("http_"):
            status = int(fault[5:])
            return web.json_response(ERROR_BODIES[status], status=status)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._stream(request, resp, body, served)
        except ConnectionError:
            pass  # the client went away (a timeout test): nothing more to send
        finally:
            self._handlers.discard(task)
        return resp

    async def _stream(
        self, request: web.Request, resp: web.StreamResponse, body: dict, served: Served
    ) -> None:
        cfg = self.config
        chat = request.path.endswith("/chat/completions")
        opts = body.get("stream_options") or {}
        continuous = bool(opts.get("continuous_usage_stats"))
        prompt = body["messages"][-1]["content"] if chat else body["prompt"]
        frame = _Frame(chat, body.get("model", cfg.model), count_tokens(prompt))
        n = int(body.get("max_tokens") or 16)
        k = cfg.tokens_per_chunk
        t0 = served.arrival_ns + int(cfg.ttft_s * 1e9)
        gap = int(cfg.gap_s * 1e9)
        pending: list[bytes] = []
        if chat:
            pending.append(frame.role(continuous))
        sent = chunk = 0
        while sent < n:
            if served.fault and chunk == 2 and await self._fault(request, resp, served.fault):
                return
            ntok = min(k, n - sent)
            sent += ntok
            pending.append(frame.tokens(chunk, ntok, sent, sent >= n, continuous, cfg.empty_text))
            if gap or chunk == 0 or len(pending) >= cfg.events_per_write or sent >= n:
                await _sleep_until(t0 + chunk * gap)
                t = perf_counter_ns()
                await resp.write(b"".join(pending))
                pending.clear()
                served.send_ns.append(t)
                if chunk == 0 and cfg.hold_gil_s:
                    _hold_gil(cfg.hold_gil_s)
            else:
                served.send_ns.append(perf_counter_ns())
            served.tokens.append(ntok)
            chunk += 1
        if opts.get("include_usage"):
            pending.append(frame.usage(sent))
        pending.append(b"data: [DONE]\n\n")
        await resp.write(b"".join(pending))
        await resp.write_eof()
        served.completed = True

    async def _fault(self, request: web.Request, resp: web.StreamResponse, fault: str) -> bool:
        """Acts out a mid-stream fault; True when the stream ends here."""
        if fault == "bad_json":
            await resp.write(b'data: {"choices": [{"text": "oops"\n\n')
            return False
        if fault == "close_mid":
            assert request.transport is not None
            request.transport.close()
            return True
        if fault == "stall":
            assert self._stop is not None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.config.stall_s)
            return request.transport is None or request.transport.is_closing()
        if fault == "long_line":
            event = {"choices": [{"index": 0, "text": "x" * (4 << 20), "finish_reason": None}]}
            await resp.write(b"data: " + orjson.dumps(event) + b"\n\n")
            return False
        if fault == "error_event":
            err = {"error": {"message": "engine error mid-stream", "type": "InternalServerError"}}
            await resp.write(b"data: " + orjson.dumps(err) + b"\n\ndata: [DONE]\n\n")
            await resp.write_eof()
            return True
        raise ValueError(f"unknown fault {fault!r}")


class _Frame:
    """Builds the SSE events of one response in vLLM's wire format."""

    def __init__(self, chat: bool, model: str, prompt_tokens: int) -> None:
        self.chat = chat
        self.prompt_tokens = prompt_tokens
        kind = "chat.completion.chunk" if chat else "text_completion"
        self.head = {"id": "cmpl-paced", "object": kind, "created": 0, "model": model}

    def _event(self, choices: list, usage_tokens: int | None) -> bytes:
        obj = {**self.head, "choices": choices}
        if usage_tokens is not None:
            obj["usage"] = {
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": usage_tokens,
                "total_tokens": self.prompt_tokens + usage_tokens,
            }
        return b"data: " + orjson.dumps(obj) + b"\n\n"

    def role(self, continuous: bool) -> bytes:
        choice = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
        return self._event([choice], 0 if continuous else None)

    def tokens(
        self, chunk: int, ntok: int, total: int, last: bool, continuous: bool, empty: bool
    ) -> bytes:
        text = "" if empty else "".join(f" {WORDS[(chunk + i) % len(WORDS)]}" for i in range(ntok))
        finish = "length" if last else None
        if self.chat:
            choice = {"index": 0, "delta": {"content": text}, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text, "finish_reason": finish}
        return self._event([choice], total if continuous else None)

    def usage(self, total: int) -> bytes:
        return self._event([], total)


def _hold_gil(seconds: float) -> None:
    """Sleeps without releasing the GIL: a PyDLL call keeps it, whatever the machine's speed."""
    ctypes.PyDLL(None).usleep(round(seconds * 1e6))


def _peer(request: web.Request) -> tuple | None:
    return request.transport.get_extra_info("peername") if request.transport else None


async def _sleep_until(t_ns: int) -> None:
    delay = t_ns - perf_counter_ns()
    if delay > 0:
        await asyncio.sleep(delay / 1e9)


class ThreadedPacedServer:
    """The paced server on its own event loop in a thread, for tests that run sync code."""

    def __init__(self, config: PacedConfig | None = None) -> None:
        self.server = PacedServer(config)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def url(self) -> str:
        return self.server.url

    def __enter__(self) -> PacedServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self._loop).result(10)
        return self.server

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--ttft-ms", type=float, default=50)
    ap.add_argument("--itl-ms", type=float, default=20)
    ap.add_argument("--tokens-per-chunk", type=int, default=1)
    ap.add_argument("--model", default="paced")
    ap.add_argument("--read-delay-ms", type=float, default=0, help="wait before each read")
    args = ap.parse_args()
    cfg = PacedConfig(
        ttft_s=args.ttft_ms / 1e3,
        gap_s=args.itl_ms / 1e3,
        tokens_per_chunk=args.tokens_per_chunk,
        model=args.model,
        events_per_write=1 if args.itl_ms else 256,
        read_delay_s=args.read_delay_ms / 1e3,
    )

    async def serve() -> None:
        srv = PacedServer(cfg)
        await srv.start(args.port)
        print(f"listening on {srv.url}", flush=True)
        await asyncio.Event().wait()

    import uvloop

    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C / SIGINT is the way to stop it
        uvloop.run(serve())


if __name__ == "__main__":
    main()
