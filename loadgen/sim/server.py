"""The sim's HTTP face: an aiohttp app that looks like a vLLM v1 OpenAI server to a client.

The engine and its runner (engine.py, runner.py) decide when each token exists; this module only
turns their outputs into vLLM's wire format, at the real time each step ends, and adds what a
test needs to check a client against the truth (`/sim/requests`, `/sim/config`).

A request arrives in the engine at the instant its body was received, not after it was
tokenized: the virtual clock tokenizes in no time, and both clocks must model the same engine.
So the ground truth's TTFT (first_token - arrival) excludes tokenizing, and a client's TTFT over
loopback includes it only where it delayed the request past a step boundary (a busy engine
takes a request into the first step computed after it was submitted). Long prompts are
tokenized in parts with the event loop free in between, so a whale being tokenized does not hold
back the outputs of the streams already running.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest

from loadgen import __version__
from loadgen.clock import Clock
from loadgen.codec import json_field, to_json
from loadgen.sim.engine import AdmissionRejected, Engine, EngineConfig, SimRequest, TokenOutput
from loadgen.sim.faults import FaultConfig, FaultInjector, RequestFaults
from loadgen.sim.metrics import CONTENT_TYPE, HttpStats, SimCollector, cache_config_labels
from loadgen.sim.openai_wire import (
    DONE,
    SSE_HEADERS,
    Api,
    ParsedRequest,
    ResponseShaper,
    WireError,
    model_list,
    parse_detokenize,
    parse_json_object,
    parse_request,
    parse_tokenize,
    reasoning_split,
    resolve_max_tokens,
)
from loadgen.sim.requests import asked_text, needle_answer
from loadgen.sim.runner import SimRunner
from loadgen.simoptions import SIM_MAX_MODEL_LEN

# Characters tokenized between two yields to the event loop: 1-2 ms of encoding on this machine
# (bench/sim_tokenize_lateness.py; smaller parts cut lateness further but lengthen the encode).
TOKENIZE_SLICE_CHARS = 16_384


@dataclass(frozen=True, slots=True)
class SimServerConfig:
    """Everything the simulated server is started with."""

    engine: EngineConfig = field(default_factory=EngineConfig)
    model: str = "loadgen-sim"
    max_model_len: int = SIM_MAX_MODEL_LEN
    speed: float = 1.0
    faults: FaultConfig = field(default_factory=FaultConfig)
    # The first N tokens of each chat answer stream as reasoning deltas (a thinking model
    # behind vLLM's reasoning parser); usage reports them as reasoning_tokens.
    reasoning_tokens: int = json_field(default=0, omit="default")
    # Engine seconds each request waits in the API server before the engine's arrival stamp,
    # so the client sees it in every TTFT and vllm:time_to_first_token_seconds does not: a
    # known added TTFT (analysis/added_ttft.py must find it).
    api_delay_s: float = json_field(default=0.0, omit="default")
    # /config's JSON (the codec's form, with the engine as `effective` makes it) ends with
    # the pool the engine's blocks make.
    json_derived: ClassVar[tuple[str, ...]] = ("kv_cache_size_tokens",)

    def __post_init__(self) -> None:
        pool = self.kv_cache_size_tokens
        if self.max_model_len < 1:
            raise ValueError(f"max_model_len must be at least 1, got {self.max_model_len}")
        if self.max_model_len > pool:
            # vLLM refuses to start when one max-length request cannot fit the KV pool.
            raise ValueError(
                f"max_model_len={self.max_model_len} does not fit the KV cache of {pool} tokens "
                f"(num_gpu_blocks={self.engine.num_gpu_blocks} x block_size="
                f"{self.engine.block_size}); lower --max-model-len or raise --num-gpu-blocks"
            )
        if self.speed <= 0:
            raise ValueError(f"speed must be > 0, got {self.speed}")
        if self.reasoning_tokens < 0 or self.api_delay_s < 0:
            raise ValueError("reasoning_tokens and api_delay_s must be >= 0")

    @property
    def kv_cache_size_tokens(self) -> int:
        return self.engine.num_gpu_blocks * self.engine.block_size

    def effective_engine_config(self) -> EngineConfig:
        """The engine config with the engine-level faults folded in."""
        f = self.faults
        return dataclasses.replace(
            self.engine,
            cache_dead=self.engine.cache_dead or f.cache_dead,
            drift_per_hour=f.drift / 100 if f.drift else self.engine.drift_per_hour,
            max_waiting=f.max_waiting if f.max_waiting is not None else self.engine.max_waiting,
            warm_mismatch=f.warm_mismatch or self.engine.warm_mismatch,
        )

    def effective(self) -> SimServerConfig:
        """This config with the faults folded into its engine (what /config reports)."""
        return dataclasses.replace(self, engine=self.effective_engine_config())


def boot_lines(config: SimServerConfig) -> list[str]:
    """vLLM's start-up facts in vLLM's words, so one boot-log parser reads the sim and vLLM."""
    e = config.engine
    stamp = time.strftime("%m-%d %H:%M:%S")
    blocks_per_request = -(-config.max_model_len // e.block_size)
    concurrency = e.num_gpu_blocks / blocks_per_request
    # vLLM echoes the flags it was given as a dict repr; boot-log parsers read max_num_seqs there.
    args = {
        "model": config.model,
        "max_model_len": config.max_model_len,
        "block_size": e.block_size,
        "enable_prefix_caching": e.enable_prefix_caching,
        "num_gpu_blocks_override": e.num_gpu_blocks,
        "max_num_batched_tokens": e.max_num_batched_tokens,
        "max_num_seqs": e.max_num_seqs,
    }
    if e.num_speculative_tokens:
        args["speculative_config"] = {"num_speculative_tokens": e.num_speculative_tokens}
    messages = [
        f"loadgen sim {__version__}: simulated vLLM v1 engine, profile {e.profile.name}, "
        f"speed {config.speed:g}x, model {config.model}",
        f"non-default args: {args!r}",
        f"Using max model len {config.max_model_len}",
        f"Chunked prefill is enabled with max_num_batched_tokens={e.max_num_batched_tokens}.",
        f"Setting attention block size to {e.block_size} tokens.",
        f"GPU KV cache size: {config.kv_cache_size_tokens:,} tokens",
        f"Maximum concurrency for {config.max_model_len:,} tokens per request: {concurrency:.2f}x",
    ]
    return [f"INFO {stamp} [sim] {m}" for m in messages]


class SimState:
    """What the handlers share: the engine, its runner, the tokenizer, faults and counters."""

    def __init__(self, config: SimServerConfig, clock: Clock | None = None) -> None:
        self.config = config
        self.engine = Engine(config.effective_engine_config())
        self.runner = SimRunner(self.engine, speed=config.speed, clock=clock)
        self.tokenizer = self.engine.tokenizer
        self.faults = FaultInjector(config.faults, seed=config.engine.seed)
        self.http_stats = HttpStats()
        self.client_ids: dict[str, str | None] = {}
        self.traceparents: dict[str, str] = {}
        self._ids = random.Random(config.engine.seed)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(
            SimCollector(
                self.engine,
                model_name=config.model,
                cache_info=cache_config_labels(config.engine),
                http_stats=self.http_stats,
            )
        )

    def new_request_id(self, api: Api) -> str:
        prefix = "cmpl" if api == "completions" else "chatcmpl"
        return f"{prefix}-{self._ids.getrandbits(128):032x}"


STATE = web.AppKey("sim_state", SimState)


def create_app(config: SimServerConfig, clock: Clock | None = None) -> web.Application:
    """The aiohttp application; its SimState is `app[STATE]`, started and stopped with the app.
    `clock` drives the runner (default: perf_counter_ns and real sleeps)."""
    app = web.Application(client_max_size=64 * 1024 * 1024)
    state = SimState(config, clock)
    app[STATE] = state
    h = _Handlers(state)
    app.router.add_post("/v1/completions", h.completions)
    app.router.add_post("/v1/chat/completions", h.chat)
    app.router.add_get("/v1/models", h.models)
    app.router.add_get("/health", h.health)
    app.router.add_get("/ping", h.health)
    app.router.add_post("/ping", h.health)
    app.router.add_get("/version", h.version)
    app.router.add_post("/tokenize", h.tokenize)
    app.router.add_post("/detokenize", h.detokenize)
    app.router.add_get("/metrics", h.metrics)
    app.router.add_get("/sim/requests", h.sim_requests)
    app.router.add_get("/sim/config", h.sim_config)

    async def runner_lifecycle(_: web.Application) -> AsyncIterator[None]:
        await state.runner.start()
        yield
        await state.runner.stop()

    app.cleanup_ctx.append(runner_lifecycle)
    return app


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json")


def _error(e: WireError) -> web.Response:
    return _json(e.body(), status=e.status)


class _Handlers:
    def __init__(self, state: SimState) -> None:
        self.s = state

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "completions")

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "chat")

    async def _generate(self, request: web.Request, api: Api) -> web.StreamResponse:
        s = self.s
        body = await request.read()
        if s.config.api_delay_s:
            await asyncio.sleep(s.config.api_delay_s / s.config.speed)
        received_s = s.runner.engine_now_s()
        try:
            parsed = parse_request(api, body, s.config.model)
            self._check_model(parsed.model)
            prompt_ids = await self._prompt_ids(parsed)
            max_tokens = resolve_max_tokens(
                parsed.max_tokens, len(prompt_ids), s.config.max_model_len
            )
            max_tokens = s.config.faults.generated_tokens(max_tokens, parsed.ignore_eos)
        except WireError as e:
            return _error(e)
        client_id = request.headers.get("X-Request-Id") or parsed.client_request_id
        faults = s.faults.draw(client_id)
        if faults.http_status is not None:
            return _error(
                WireError(faults.http_status, f"injected fault: HTTP {faults.http_status}")
            )
        request_id = s.new_request_id(api)
        s.client_ids[request_id] = client_id
        if (traceparent := request.headers.get("traceparent")) is not None:
            # vLLM (--otlp-traces-endpoint) continues the caller's trace; the sim keeps the
            # header per request and logs it, so a run's records join the sim's own.
            s.traceparents[request_id] = traceparent
            print(f"INFO Received request {request_id}: traceparent={traceparent}", flush=True)
        sim_request = SimRequest(
            request_id=request_id,
            prompt_token_ids=prompt_ids,
            max_tokens=max_tokens,
            min_tokens=parsed.min_tokens,
            ignore_eos=parsed.ignore_eos,
            cache_salt=parsed.cache_salt,
            answer_prefix=needle_answer(
                asked_text(parsed.messages, parsed.prompt_text),
                s.tokenizer,
                s.faults.config.needle_miss,
            ),
        )
        try:
            queue = s.runner.submit(sim_request, arrival_s=received_s)
        except AdmissionRejected as e:
            s.http_stats.admission_rejections += 1
            return _error(WireError(503, f"Server is overloaded, request rejected: {e}"))
        except ValueError as e:
            return _error(WireError(400, str(e)))
        shaper = ResponseShaper(
            api=api,
            request_id=request_id,
            created=int(time.time()),
            model=parsed.model,
            prompt_tokens=len(prompt_ids),
            continuous_usage=parsed.continuous_usage,
            reasoning_tokens=s.config.reasoning_tokens if api == "chat" else 0,
            tool=parsed.tool,
        )
        outcome = _Outcome()
        try:
            if parsed.stream:
                return await self._stream(request, queue, shaper, parsed, faults, outcome)
            return await self._collect(queue, shaper, outcome)
        finally:
            if not outcome.finished:
                # The client left (handler cancelled) or the stream was dropped: free its blocks.
                s.runner.abort(request_id)
                s.http_stats.finished["abort"] += 1

    def _check_model(self, model: str) -> None:
        if model != self.s.config.model:
            raise WireError(404, f"The model `{model}` does not exist.", "model")

    async def _prompt_ids(self, parsed: ParsedRequest) -> list[int]:
        """The prompt's ids, encoded in parts with a yield to the event loop between two, so
        the runner delivers other streams' outputs on time while a long prompt is encoded."""
        tok = self.s.tokenizer
        if parsed.prompt_token_ids is not None:
            return parsed.prompt_token_ids
        if parsed.messages is not None:
            text = tok.apply_chat_template(parsed.messages, parsed.chat_template_kwargs)
        else:
            text = parsed.prompt_text or ""
        ids: list[int] = []
        long = len(text) > TOKENIZE_SLICE_CHARS
        for part in tok.encode_slices(text, TOKENIZE_SLICE_CHARS):
            ids.extend(part)
            if long:
                await asyncio.sleep(0)
        return ids

    def _finish(self, out: TokenOutput, outcome: _Outcome) -> None:
        outcome.finished = True
        self.s.http_stats.finished[out.finish_reason or "length"] += 1

    async def _stream(
        self,
        request: web.Request,
        queue: asyncio.Queue[TokenOutput],
        shaper: ResponseShaper,
        parsed: ParsedRequest,
        faults: RequestFaults,
        outcome: _Outcome,
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers=SSE_HEADERS)
        # Headers go out now, before the first token, as vLLM's StreamingResponse does.
        await resp.prepare(request)
        decode = self.s.tokenizer.decode
        first = True
        while True:
            out = await queue.get()
            if out.finished:
                self._finish(out, outcome)
            elif not out.token_ids:
                continue
            if first and (role := shaper.role_chunk()) is not None:
                await resp.write(role)
            finish = out.finish_reason if out.finished else None
            ids = out.token_ids
            done = out.completion_tokens_so_far
            r = reasoning_split(done - len(ids), len(ids), shaper.reasoning_tokens)
            thought = decode(ids[:r]) if r else None
            text = decode(ids[r:]) if r < len(ids) else None
            await resp.write(shaper.content_chunk(text, finish, done, thought, first=first))
            if first and faults.mid_stream == "drop" and not out.finished:
                # An abrupt close mid-body: the client sees a truncated chunked stream.
                assert request.transport is not None
                request.transport.abort()
                return resp
            if first and faults.mid_stream == "stall":
                await asyncio.sleep(self.s.config.faults.stall_s)
            first = False
            if out.finished:
                break
        if parsed.include_usage:
            await resp.write(
                shaper.usage_chunk(out.completion_tokens_so_far, out.num_cached_tokens)
            )
        await resp.write(DONE)
        await resp.write_eof()
        return resp

    async def _collect(
        self, queue: asyncio.Queue[TokenOutput], shaper: ResponseShaper, outcome: _Outcome
    ) -> web.Response:
        token_ids: list[int] = []
        while not (out := await queue.get()).finished:
            token_ids.extend(out.token_ids)
        token_ids.extend(out.token_ids)
        self._finish(out, outcome)
        body = shaper.full_response(
            self.s.tokenizer.decode(token_ids),
            out.finish_reason,
            out.completion_tokens_so_far,
            out.num_cached_tokens,
        )
        return _json(body)

    async def models(self, request: web.Request) -> web.Response:
        cfg = self.s.config
        return _json(model_list(cfg.model, cfg.max_model_len, int(time.time())))

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:
        return _json({"version": f"{__version__}+loadgen-sim"})

    async def tokenize(self, request: web.Request) -> web.Response:
        try:
            parsed = parse_tokenize(parse_json_object(await request.read()), self.s.config.model)
        except WireError as e:
            return _error(e)
        ids = await self._prompt_ids(parsed)
        max_len = self.s.config.max_model_len
        return _json(
            {"count": len(ids), "max_model_len": max_len, "tokens": ids, "token_strs": None}
        )

    async def detokenize(self, request: web.Request) -> web.Response:
        try:
            tokens = parse_detokenize(parse_json_object(await request.read()))
            return _json({"prompt": self.s.tokenizer.decode(tokens)})
        except WireError as e:
            return _error(e)
        except ValueError as e:
            return _error(WireError(400, str(e), "tokens"))

    async def metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self.s.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    async def sim_requests(self, request: web.Request) -> web.Response:
        return _json(ground_truth_rows(self.s))

    async def sim_config(self, request: web.Request) -> web.Response:
        return _json(to_json(self.s.config.effective()))


@dataclass(slots=True)
class _Outcome:
    finished: bool = False


def ground_truth_rows(
    state: SimState, ns: Callable[[float], int] | None = None
) -> list[dict[str, Any]]:
    """The engine's per-request truth, every engine time also given as a perf_counter_ns
    instant (`*_ns` beside each `*_s`), so a client record can be checked against it. A
    request's arrival is when the server received it (before tokenizing).
    `ns` maps engine seconds to another clock's ns (the virtual run clock)."""
    ns = ns or state.runner.wall_ns
    rows = []
    for row in state.engine.ground_truth():
        first, finished = row["first_token_s"], row["finished_s"]
        rows.append(
            {
                **row,
                "client_request_id": state.client_ids.get(row["request_id"]),
                "traceparent": state.traceparents.get(row["request_id"]),
                "arrival_ns": ns(row["arrival_s"]),
                "admitted_ns": [ns(t) for t in row["admitted_s"]],
                "first_token_ns": None if first is None else ns(first),
                "finished_ns": None if finished is None else ns(finished),
                "preemptions_ns": [ns(t) for t in row["preemptions"]],
                "prefill_chunks_ns": [
                    [i, ns(start), ns(end), n] for i, start, end, n in row["prefill_chunks"]
                ],
                "tokens_per_step_ns": [[i, ns(end), n] for i, end, n in row["tokens_per_step"]],
            }
        )
    return rows


@dataclass(frozen=True, slots=True)
class SimServer:
    """A running sim: its base URL, the engine's runner and the boot log it would print."""

    url: str
    port: int
    state: SimState
    boot_log: list[str]

    @property
    def runner(self) -> SimRunner:
        return self.state.runner

    @property
    def engine(self) -> Engine:
        return self.state.engine


@asynccontextmanager
async def start_sim_server(
    config: SimServerConfig, host: str = "127.0.0.1", port: int = 0, *, clock: Clock | None = None
) -> AsyncIterator[SimServer]:
    """Serves the sim on host:port (0 = a free port) for the duration of the block."""
    app = create_app(config, clock)
    # handler_cancellation: a client disconnect cancels its handler, which aborts the request.
    app_runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await app_runner.setup()
    try:
        site = web.TCPSite(app_runner, host, port)
        await site.start()
        bound = app_runner.addresses[0][1]
        yield SimServer(
            url=f"http://{host}:{bound}",
            port=bound,
            state=app[STATE],
            boot_log=boot_lines(config),
        )
    finally:
        await app_runner.cleanup()
