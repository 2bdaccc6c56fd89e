"""The sim on a virtual clock: the same engine, faults and /metrics as `loadgen sim`, no HTTP.

A discrete-event face for the engine. Time is the run clock in integer ns and only moves when
the driver advances it to the next event: a request's arrival, the start of the engine's next
step, a client timeout. Nothing sleeps, so the answer does not depend on how busy the machine
is, and an hour of traffic takes as long as its steps take to compute.

It does what the sim server and the client together do over loopback, with the wire cut out:
- a request is tokenized as the server would (the same chat template, the same max_tokens
  check), draws its HTTP faults from the same seeded injector in the same order, and enters the
  engine with its arrival at the current instant;
- a step is computed when it starts, as the wall-clock runner does, and each of its outputs is
  one content chunk arriving when the step ends (under spec decode, one chunk with k tokens);
- each finished request becomes the StreamRecord the client would have written: usage-true
  tokens per chunk (`usage_continuous`), t_sent = t_headers = arrival (the sim sends headers at
  once; api_delay_s later where set), t_first/t_last/t_done on chunk arrivals; errors keep the
  client's classes and messages (http_NNN, connection_closed for an injected drop, *_timeout
  from the same limits);
- /metrics is read from the same collector the server renders its exposition from.

What the client measures over loopback that this does not: its own lateness and event-loop lag
(a virtual client is never late), the transport, and `bytes` (0: nothing crosses a wire).
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.metrics_core import Metric

from loadgen.client.decode import reasoning_fields
from loadgen.client.endpoint import Timeouts, timeout_error
from loadgen.needle import needle_hit
from loadgen.records import StreamError, StreamRecord
from loadgen.request import StreamRequest, record_fields
from loadgen.sim.engine import AdmissionRejected, EngineConfig, SimRequest, TokenOutput
from loadgen.sim.faults import RequestFaults, parse_fault_options
from loadgen.sim.openai_wire import (
    WireError,
    call_id,
    chat_messages,
    resolve_max_tokens,
    tool_arguments,
    tool_to_call,
)
from loadgen.sim.profile_file import resolve_step_profile
from loadgen.sim.requests import asked_text, needle_answer
from loadgen.sim.server import SimServerConfig, SimState, ground_truth_rows
from loadgen.simoptions import SIM_FACTS, SIM_OPTION_NAMES, owned

NS = 1_000_000_000

OnRecord = Callable[[StreamRecord], None]


class SettingsError(ValueError):
    """A sim setting the virtual sim does not take; the message names it and the fix."""


def config_from_settings(settings: Mapping[str, Any]) -> SimServerConfig:
    """The SimServerConfig `loadgen sim` would boot with these flags (vLLM names, underscores:
    a scenario's `sim:` block plus an arm's flags); each is a row of loadgen/simoptions.py, or
    `profile` or `faults`."""
    for name in settings:
        if name not in SIM_OPTION_NAMES and name not in ("profile", "faults"):
            raise SettingsError(
                f"sim flag {name!r} is not modelled by the sim; drop it from sim: or the sweep"
            )
    engine = owned(settings, "engine")
    try:
        if "profile" in settings:
            engine["profile"], overhead = resolve_step_profile(settings["profile"])
            if overhead is not None and "request_overhead_s" not in settings:
                engine["request_overhead_s"] = overhead
        engine_cfg = dataclasses.replace(EngineConfig(), **engine)
        faults = parse_fault_options(list(settings.get("faults", ())))
        return SimServerConfig(engine=engine_cfg, faults=faults, **owned(settings, "server"))
    except (ValueError, KeyError) as exc:
        raise SettingsError(f"sim settings: {str(exc).strip(chr(39))}") from None


def sim_facts(config: SimServerConfig) -> dict[str, int]:
    """The limits the launcher reads from a booted sim (boot log, flags), from its config."""
    facts = {o.name: getattr(config.engine if o.owner == "engine" else config, o.name)
             for o in SIM_FACTS}  # fmt: skip
    # The pool in tokens is no setting but a product of two: a launched sim's boot log says it.
    return facts | {"kv_cache_tokens": config.kv_cache_size_tokens}


@dataclass(slots=True)
class _Flight:
    """One request inside the virtual server, as its client would see it so far."""

    req: StreamRequest
    engine_id: str
    t_sent: int
    prompt_tokens: int
    faults: RequestFaults
    on_record: OnRecord
    chunk_ns: list[int] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    stall_until: int = 0
    # When the response head leaves: the API server's delay after t_sent (api_delay_s).
    t_headers: int = 0
    # The answer's token ids, for requests that keep their text (session turns) only.
    answer_ids: list[int] | None = None


class VirtualSim:
    """One booted sim on the run clock; `now_ns` moves only by `advance_to` and `step_next`."""

    def __init__(self, config: SimServerConfig, timeouts: Timeouts, *, model: str) -> None:
        self.state = SimState(config)
        self.engine = self.state.engine
        self.tokenizer = self.state.tokenizer
        self.model = model
        self.timeouts = timeouts
        self.now_ns = 0
        # When the last computed step ends: its outputs are still on their way until then.
        self._settle_ns = 0
        self._ns_per_engine_s = NS / config.speed
        self._flights: dict[str, _Flight] = {}
        self._deadlines: list[tuple[int, int, str]] = []
        self._seq = itertools.count()

    # -- what a client could ask over HTTP -------------------------------------------------

    def metric_families(self) -> list[Metric]:
        """GET /metrics, now, as the metric families the exposition text is rendered from."""
        return list(self.state.registry.collect())

    def prompt_ids(self, text: str, *, chat: bool, template: Mapping[str, Any] | None) -> list[int]:
        """The prompt's token ids as the server tokenizes it (chat: through its template)."""
        tok = self.tokenizer
        if chat:
            text = tok.apply_chat_template([{"role": "user", "content": text}], template)
        return tok.encode(text)

    def _request_ids(self, req: StreamRequest) -> list[int]:
        """The ids the server would compute for `req`: a session turn's whole conversation
        through the chat template, else the prompt (templated as one user message for chat)."""
        if req.messages is None:
            chat = req.api == "chat"
            return self.prompt_ids(req.prompt, chat=chat, template=req.chat_template_kwargs)
        tok = self.tokenizer
        messages = chat_messages(list(req.messages))
        return tok.encode(tok.apply_chat_template(messages, req.chat_template_kwargs))

    def truth_rows(self) -> list[dict[str, Any]]:
        """GET /sim/requests: the engine's truth, `*_ns` on the run clock."""
        return ground_truth_rows(self.state, self._ns)

    @property
    def in_flight(self) -> int:
        return len(self._flights)

    @property
    def engine_steps(self) -> int:
        return len(self.engine.iteration_tokens)

    # -- the clock -------------------------------------------------------------------------

    def advance_to(self, t_ns: int) -> None:
        if t_ns < self.now_ns:
            raise ValueError(f"the virtual clock cannot go back from {self.now_ns} to {t_ns}")
        self.now_ns = t_ns

    def next_event_ns(self) -> int | None:
        """The next instant something happens inside the server (a step starts, a client
        timeout expires, the last step's outputs arrive), or None when nothing will until a
        new request comes."""
        start = self.engine.next_step_start_s()
        events = [self._next_deadline()]
        if start is not None:
            events.append(max(self._ns(start), self.now_ns))
        elif self._settle_ns > self.now_ns:
            events.append(self._settle_ns)
        due = [t for t in events if t is not None]
        return min(due) if due else None

    def step_next(self) -> None:
        """Advances to the next event and handles it: an expired timeout first (a client that
        gave up at that instant is gone before a step starting then), else one engine step."""
        t = self.next_event_ns()
        if t is None:
            return
        self.advance_to(t)
        deadline = self._next_deadline()
        if deadline is not None and deadline <= t:
            self._expire(heapq.heappop(self._deadlines)[2])
            return
        start = self.engine.next_step_start_s()
        if start is None or max(self._ns(start), t) > t:
            return  # only the last step's outputs arriving: the clock is there now
        step = self.engine.step()
        if step is None:
            return
        end = self._ns(step.start_s + step.duration_s)
        self._settle_ns = max(self._settle_ns, end)
        for out in step.outputs:
            self._deliver(out, end)

    # -- requests --------------------------------------------------------------------------

    def submit(self, req: StreamRequest, on_record: OnRecord) -> None:
        """The request arrives now; `on_record` gets its record when it ends (maybe now)."""
        s = self.state
        t = self.now_ns
        chat = req.messages is not None or req.api == "chat"
        if req.model != self.model:
            self._refuse(req, on_record, WireError(404, f"The model `{req.model}` does not exist."))
            return
        ids = self._request_ids(req)
        try:
            max_tokens = resolve_max_tokens(req.max_tokens, len(ids), s.config.max_model_len)
            max_tokens = s.config.faults.generated_tokens(max_tokens, req.ignore_eos)
        except WireError as e:
            self._refuse(req, on_record, e)
            return
        faults = s.faults.draw(req.id)
        if faults.http_status is not None:
            status = faults.http_status
            self._refuse(req, on_record, WireError(status, f"injected fault: HTTP {status}"))
            return
        engine_id = s.new_request_id("chat" if chat else "completions")
        s.client_ids[engine_id] = req.id
        sim_req = SimRequest(
            request_id=engine_id,
            prompt_token_ids=ids,
            max_tokens=max_tokens,
            min_tokens=req.min_tokens or 0,
            ignore_eos=req.ignore_eos,
            cache_salt=req.cache_salt,
            arrival_s=t / self._ns_per_engine_s + s.config.api_delay_s,
            answer_prefix=needle_answer(
                asked_text(req.messages, req.prompt), self.tokenizer, s.faults.config.needle_miss
            ),
        )
        try:
            self.engine.add_request(sim_req)
        except AdmissionRejected as e:
            s.http_stats.admission_rejections += 1
            msg = f"Server is overloaded, request rejected: {e}"
            self._refuse(req, on_record, WireError(503, msg))
            return
        except ValueError as e:
            self._refuse(req, on_record, WireError(400, str(e)))
            return
        self._flights[engine_id] = _Flight(
            req, engine_id, t, len(ids), faults, on_record,
            answer_ids=[] if req.keep_text else None, t_headers=t + self._ns(s.config.api_delay_s),
        )  # fmt: skip
        self._arm_deadline(engine_id)

    def _refuse(self, req: StreamRequest, on_record: OnRecord, e: WireError) -> None:
        t = self.now_ns
        error = StreamError(f"http_{e.status}", e.message)
        on_record(_record(req, t, None, [], [], e.status, t, error))

    def _deliver(self, out: TokenOutput, end_ns: int) -> None:
        flight = self._flights.get(out.request_id)
        if flight is None:
            return
        arrival = max(end_ns, flight.stall_until)
        deadline = self._deadline_of(flight)
        if deadline is not None and arrival > deadline:
            return  # the client gave up first; its timeout event ends the flight
        # A stalled delivery is an instant the run waits for, as a client would: the clock
        # went idle at the last step, its polls stopped and the next rep began 2 s early.
        self._settle_ns = max(self._settle_ns, arrival)
        first = not flight.chunk_ns
        flight.chunk_ns.append(arrival)
        flight.chunk_tokens.append(len(out.token_ids))
        if flight.answer_ids is not None:
            flight.answer_ids.extend(out.token_ids)
        stats = self.state.http_stats
        if out.finished:
            stats.finished[out.finish_reason or "length"] += 1
            self._end(flight, arrival, None, out.num_cached_tokens, out.finish_reason)
            return
        if first and flight.faults.mid_stream == "drop":
            events = 2 if flight.req.api == "chat" else 1
            why = f"after {events} events: connection reset by the server (injected drop)"
            self._abort(flight, arrival, StreamError("connection_closed", why))
            return
        if first and flight.faults.mid_stream == "stall":
            flight.stall_until = arrival + round(self.state.config.faults.stall_s * NS)
        self._arm_deadline(flight.engine_id)

    def _expire(self, engine_id: str) -> None:
        flight = self._flights.get(engine_id)
        if flight is None:
            return
        deadline = self._deadline_of(flight)
        if deadline is None or deadline > self.now_ns:
            return  # moved on since this entry was armed
        self._abort(flight, self.now_ns, timeout_error(self._expired_kind(flight), self.timeouts))

    def _abort(self, flight: _Flight, t_ns: int, error: StreamError) -> None:
        self.engine.abort_request(flight.engine_id)
        self.state.http_stats.finished["abort"] += 1
        self._end(flight, t_ns, error, None, None)

    def _end(
        self,
        flight: _Flight,
        t_done: int,
        error: StreamError | None,
        cached: int | None,
        finish: str | None,
    ) -> None:
        del self._flights[flight.engine_id]
        chat = flight.req.messages is not None or flight.req.api == "chat"
        rec = _record(
            flight.req, flight.t_sent, flight.prompt_tokens, flight.chunk_ns,
            flight.chunk_tokens, 200, t_done, error, cached, finish,
            self.state.config.reasoning_tokens if chat else 0, flight.t_headers,
        )  # fmt: skip
        tool = tool_to_call(flight.req.extra_body) if chat else None
        if tool is not None and rec.chunks:
            # The wire sim streams this answer as one tool call: its text is the arguments.
            text = self.tokenizer.decode(flight.answer_ids or [])
            args = tool_arguments(text, first=True, last=True)
            call = (call_id(flight.engine_id), tool, args)
            rec = dataclasses.replace(rec, answer="", tool_calls=1, calls=(call,),
                                      finish_reason=finish and "tool_calls")  # fmt: skip
        elif flight.answer_ids is not None:
            answer = self.tokenizer.decode(flight.answer_ids)
            hit = None if flight.req.needle is None else needle_hit(flight.req.needle, answer)
            rec = dataclasses.replace(rec, answer=answer, needle_hit=hit)
        flight.on_record(rec)

    # -- client timeouts -------------------------------------------------------------------

    def _deadline_of(self, flight: _Flight) -> int | None:
        """When the client's watchdog would give up on this flight, given what it has seen."""
        t = self.timeouts
        limits = []
        if t.total_s is not None:
            limits.append(flight.t_sent + round(t.total_s * NS))
        if not flight.chunk_ns:
            if t.first_token_s is not None:
                limits.append(flight.t_sent + round(t.first_token_s * NS))
        elif t.idle_s is not None:
            limits.append(flight.chunk_ns[-1] + round(t.idle_s * NS))
        return min(limits) if limits else None

    def _expired_kind(self, flight: _Flight) -> str:
        t = self.timeouts
        if t.total_s is not None and self.now_ns >= flight.t_sent + round(t.total_s * NS):
            return "total"
        return "idle" if flight.chunk_ns else "first_byte"

    def _arm_deadline(self, engine_id: str) -> None:
        deadline = self._deadline_of(self._flights[engine_id])
        if deadline is not None:
            heapq.heappush(self._deadlines, (deadline, next(self._seq), engine_id))

    def _next_deadline(self) -> int | None:
        """The earliest armed deadline of a flight still in the air whose deadline it still is."""
        heap = self._deadlines
        while heap:
            t, _, engine_id = heap[0]
            flight = self._flights.get(engine_id)
            if flight is not None and self._deadline_of(flight) == t:
                return t
            heapq.heappop(heap)  # ended, or a later chunk moved its deadline on
        return None

    def _ns(self, engine_s: float) -> int:
        return round(engine_s * self._ns_per_engine_s)


class VirtualFleet:
    """Several VirtualSims on one run clock behind a router: `pick` names the replica of each
    request as it arrives, `done` hears when its stream ends there. Each replica keeps its own
    engine, KV cache and metrics; the fleet steps whichever replica's event comes first (ties:
    the lowest index), so a run is as exact and repeatable as on one engine."""

    def __init__(
        self,
        sims: list[VirtualSim],
        pick: Callable[[StreamRequest], int],
        done: Callable[[int], None],
    ) -> None:
        self.sims, self._pick, self._done = sims, pick, done
        self.tokenizer = sims[0].tokenizer
        self.prompt_ids = sims[0].prompt_ids

    @property
    def now_ns(self) -> int:
        return self.sims[0].now_ns

    @property
    def in_flight(self) -> int:
        return sum(s.in_flight for s in self.sims)

    @property
    def engine_steps(self) -> int:
        return sum(s.engine_steps for s in self.sims)

    def advance_to(self, t_ns: int) -> None:
        for sim in self.sims:
            sim.advance_to(t_ns)

    def next_event_ns(self) -> int | None:
        due = [t for t in (s.next_event_ns() for s in self.sims) if t is not None]
        return min(due) if due else None

    def step_next(self) -> None:
        t = self.next_event_ns()
        if t is None:
            return
        first = next(s for s in self.sims if s.next_event_ns() == t)
        self.advance_to(t)
        first.step_next()

    def submit(self, req: StreamRequest, on_record: OnRecord) -> None:
        replica = self._pick(req)

        def ended(rec: StreamRecord) -> None:
            self._done(replica)
            on_record(dataclasses.replace(rec, replica=replica))

        self.sims[replica].submit(req, ended)


def _record(
    req: StreamRequest,
    t_sent: int,
    prompt_tokens: int | None,
    chunk_ns: list[int],
    chunk_tokens: list[int],
    http_status: int,
    t_done: int,
    error: StreamError | None,
    cached: int | None = None,
    finish: str | None = None,
    reasoning_tokens: int = 0,
    t_headers: int | None = None,
) -> StreamRecord:
    """The record the client writes for what it saw; usage came with every content chunk.
    With `reasoning_tokens` N, a chunk all of whose tokens lie in the first N is a reasoning
    chunk, as the wire sim's deltas make it; the final usage (seen only when the stream
    finished) reports min(N, completion_tokens) of them."""
    ok = http_status < 400
    # The client counts every data: event but [DONE]: chat's role delta, content, final usage.
    events = len(chunk_ns) + (1 if req.api == "chat" and chunk_ns else 0) + (finish is not None)
    return StreamRecord(
        **record_fields(req),
        status="error" if error else "ok",
        error=error,
        prompt_tokens=prompt_tokens if chunk_ns else None,
        completion_tokens=sum(chunk_tokens),
        cached_tokens=cached,
        chunks=len(chunk_ns),
        events=events,
        bytes=0,
        token_source="usage_continuous" if chunk_ns else "chunk_count",
        finish_reason=finish,
        http_status=http_status,
        t_sent_ns=t_sent,
        t_headers_ns=(t_sent if t_headers is None else t_headers) if ok else t_done,
        t_first_ns=chunk_ns[0] if chunk_ns else None,
        t_last_ns=chunk_ns[-1] if chunk_ns else None,
        session=req.session,
        turn=req.turn,
        t_done_ns=t_done,
        chunk_ns=list(chunk_ns),
        chunk_tokens=list(chunk_tokens) if chunk_ns else None,
        **_reasoning(chunk_ns, chunk_tokens, reasoning_tokens, finish is not None),
    )


def _reasoning(
    chunk_ns: list[int], chunk_tokens: list[int], n: int, finished: bool
) -> dict[str, Any]:
    reasoning_at, out_at, cum = [], -1, 0
    for i, k in enumerate(chunk_tokens):
        cum += k
        if cum <= n:
            reasoning_at.append(i)
        elif out_at < 0:
            out_at = i
    reported = min(n, cum) if n and finished else None
    tokens = list(chunk_tokens) if chunk_ns else None
    return reasoning_fields(chunk_ns, tokens, reasoning_at, out_at, reported)
