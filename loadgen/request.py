"""What to send: one streaming request, as the plan produces it and the client consumes it."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any, Literal

Api = Literal["completions", "chat"]


@dataclass(frozen=True, slots=True)
class StreamRequest:
    """One request of a run. Times are ns since the run's start (the run clock)."""

    id: str
    model: str
    prompt: str
    max_tokens: int
    api: Api = "completions"
    group: str = "default"
    rep: int = 0
    t_intended_ns: int = 0
    min_tokens: int | None = None
    ignore_eos: bool = False
    cache_salt: str | None = None
    # The token count the plan asked for (None when the prompt was not sized), and the count
    # of the prompt built for it, by loadgen's counter (None where not counted).
    requested_prompt_tokens: int | None = None
    prompt_tokens_sent: int | None = None
    # Chat template kwargs are part of the cache prefix, so a scenario pins them.
    chat_template_kwargs: dict[str, Any] | None = None
    phase: str = "measure"
    arm: str | None = None
    # A session turn: the whole conversation as chat messages (then `prompt` is unused), its
    # session id and turn index, and whether to keep the answer's text (only session turns
    # need it: the next turn resends it).
    messages: tuple[dict[str, Any], ...] | None = None
    session: str | None = None
    turn: int | None = None
    keep_text: bool = False
    # Meant to be cold: the plan salted every token of the prompt, so no earlier request can
    # share a block of it (a session's later turns and hash_ids trace rows are meant to hit);
    # None where the sender did not say. Only such a stream may raise a WARM CACHE.
    cold: bool | None = None
    # A needle prompt's planted code (loadgen/needle.py): the answer is kept and scored for it.
    needle: str | None = None
    # A session turn's second request: it carries the tool's result back (records say so).
    tool_result: bool = False
    # Pass-through body fields (temperature, seed, ...); they override nothing above.
    extra_body: dict[str, Any] = field(default_factory=dict)
    # The W3C `traceparent` header to send (--trace-context), None: none sent.
    traceparent: str | None = None


# W3C Trace Context, version 00: version-traceid-parentid-flags, lower-case hex, neither id
# all zeros (https://www.w3.org/TR/trace-context/#traceparent-header).
TRACEPARENT = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")


def new_traceparent() -> str:
    """A fresh traceparent: a random 16-byte trace id and 8-byte span id, sampled. Random, not
    derived from the run seed: a --seed or --replay run repeats its salts, and trace ids it
    repeated would merge two runs' requests into one trace in the server's tracing backend;
    the record keeps the header, so a run's joins are still reproducible from its files."""
    while True:
        trace, span = os.urandom(16).hex(), os.urandom(8).hex()
        if int(trace, 16) and int(span, 16):
            return f"00-{trace}-{span}-01"


_VALUES = attrgetter(*(f.name for f in fields(StreamRequest)))
_INTENDED = [f.name for f in fields(StreamRequest)].index("t_intended_ns")


def intended_at(req: StreamRequest, t_ns: int) -> StreamRequest:
    """`req` stamped with the instant it is intended at (run clock), as dataclasses.replace
    makes it but positionally: replace's walk of the fields by name took 5.1 us a request,
    this 2.6 us (4% of a 16-token request's client instructions at the ceiling)."""
    values = list(_VALUES(req))
    values[_INTENDED] = t_ns
    return StreamRequest(*values)


def record_fields(req: StreamRequest) -> dict[str, Any]:
    """What a StreamRecord takes from its request as sent (the client's and the virtual sim's
    records name the request the same way)."""
    return {
        "id": req.id, "group": req.group, "rep": req.rep, "phase": req.phase, "arm": req.arm,
        "api": req.api, "model": req.model, "requested_prompt_tokens": req.requested_prompt_tokens,
        "t_intended_ns": req.t_intended_ns, "max_tokens": req.max_tokens, "cold": req.cold,
        "needle_expected": req.needle, "tool_result": req.tool_result,
        "prompt_tokens_sent": req.prompt_tokens_sent, "ignore_eos": req.ignore_eos,
        "traceparent": req.traceparent,
    }  # fmt: skip


def wire_body(req: StreamRequest, *, continuous: bool) -> dict[str, Any]:
    """The OpenAI JSON body for `req`, usage always asked for; extra_body fills in fields but
    overrides none."""
    body: dict[str, Any] = {"model": req.model, "stream": True, "max_tokens": req.max_tokens}
    if req.messages is not None:
        body["messages"] = list(req.messages)
    elif req.api == "chat":
        body["messages"] = [{"role": "user", "content": req.prompt}]
    else:
        body["prompt"] = req.prompt
    opts = {"include_usage": True}
    if continuous:
        opts["continuous_usage_stats"] = True
    body["stream_options"] = opts
    if req.ignore_eos:
        body["ignore_eos"] = True
    if req.min_tokens is not None:
        body["min_tokens"] = req.min_tokens
    if req.cache_salt is not None:
        body["cache_salt"] = req.cache_salt
    if req.chat_template_kwargs:
        body["chat_template_kwargs"] = req.chat_template_kwargs
    for k, v in req.extra_body.items():
        body.setdefault(k, v)
    return body
