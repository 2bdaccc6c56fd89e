"""From SSE bytes to token-true stream facts: what one response said, event by event.

A *content chunk* is an event whose choices[0] carries non-empty text (completions `text`, chat
`delta.content`, or reasoning: `delta.reasoning_content` as vLLM's older reasoning parsers and
SGLang name it, `delta.reasoning` as newer vLLM and OpenAI-style servers do) or whose
continuous-usage `completion_tokens` grew: random-weight models emit tokens that decode to "",
and those count when usage says so. Role-only and empty deltas, the usage-only event and
`[DONE]` are not chunks.

Reasoning: a chunk whose delta carries reasoning text and no `content` is a *reasoning chunk*;
every other content chunk is an *output chunk* (one carrying both is output: the answer has
begun). TTFT stays the first chunk of any kind; the first output chunk's index is kept for TTFO.
Reasoning tokens come from `usage.completion_tokens_details.reasoning_tokens` where the server
gives it, else they are estimated (reasoning_fields below names the source).

`events` counts every `data:` event except `[DONE]` (usage-only and error events included).

Usage is *continuous* once it appears on an event that has choices and no finish_reason (vLLM's
`continuous_usage_stats`). Usage seen first on the finishing event (llama.cpp) or on a
`choices: []` event is a final total only. Per-chunk tokens (`usage_continuous`) are kept only
when every content chunk carried usage; otherwise the final total (`usage_final`); without any
usage, the chunk count (`chunk_count`). The record names the source in `token_source`.
A finishing event with usage is a chunk only when no content chunk came before it: then every
token decoded to "" and this event is the first (and last) to carry them; otherwise it is
llama.cpp's final total and carries no new token.

Faults inside the body do not stop reading: invalid JSON or a non-SSE line is counted in
`parse_errors` and the stream is read to its end (its timing stays complete, its connection
reusable), then marked `malformed_sse`; an `{"error": ...}` event marks it `server_error_event`.
The first fault names the record's error. Hostile bodies get their own classes: an event over
the parser's size cap is `line_too_long` (dropped, reading goes on), usage no server can mean
(a negative count, completion tokens past the runaway limit, cached tokens beyond the prompt)
is `bad_usage` with the server's numbers kept in the record, and a stream that sends more than
RUNAWAY_FACTOR x max_tokens + RUNAWAY_SLACK content chunks or tokens is `runaway_stream` and
reading stops there, so a server that streams forever holds at most that many timestamps. Any
excess over max_tokens is kept in the record (`over_max_tokens`).
"""

from __future__ import annotations

from typing import Any

import orjson

from loadgen.client.sse import DONE, MESSAGE, SSEParser
from loadgen.needle import needle_hit
from loadgen.records import StreamError, StreamRecord, TokenSource
from loadgen.request import StreamRequest, record_fields

_loads = orjson.loads
# What a structurally wrong event raises on the decode path below.
_MALFORMED = (ValueError, TypeError, AttributeError, IndexError, KeyError)
RUNAWAY_FACTOR = 4
RUNAWAY_SLACK = 64


class StreamDecoder:
    """Fed every body read with its arrival time (absolute perf_counter ns), once per read."""

    __slots__ = ("_limit", "_max_tokens", "_oversized", "_parser", "_sse_errors", "calls",
                 "chat", "chunk_cum", "chunk_ns", "coalesced_reads", "continuous", "done_ns",
                 "error", "events", "finish_reason", "json_errors", "last_ct", "nbytes",
                 "out_at", "reads", "reasoning_at", "texts", "usage")  # fmt: skip

    def __init__(self, chat: bool, keep_text: bool = False, max_tokens: int | None = None) -> None:
        self.chat = chat
        # The answer's text pieces, for requests that need it back (session turns) only.
        self.texts: list[str] | None = [] if keep_text else None
        self._parser = SSEParser()
        self._sse_errors = 0
        self._oversized = 0
        self.reads = 0
        # Reads that brought more than one content chunk: those chunks share one timestamp, so
        # the gaps between them are the client's, not the server's.
        self.coalesced_reads = 0
        self._max_tokens = max_tokens
        self._limit = None if max_tokens is None else RUNAWAY_FACTOR * max_tokens + RUNAWAY_SLACK
        self.events = 0
        self.nbytes = 0
        self.json_errors = 0
        self.chunk_ns: list[int] = []
        # Cumulative completion_tokens at each content chunk, -1 where the event had no usage.
        self.chunk_cum: list[int] = []
        self.continuous = False
        # Index in chunk_ns of the first output (non-reasoning) chunk, -1 until one came, and
        # the indices of the reasoning chunks (empty for a model that does not reason).
        self.out_at = -1
        self.reasoning_at: list[int] = []
        # Tool calls of the answer, [id, name, arguments] each (None until one came).
        self.calls: list[list[str]] | None = None
        self.last_ct = 0
        self.usage: dict | None = None
        self.finish_reason: str | None = None
        self.done_ns: int | None = None
        self.error: StreamError | None = None

    @property
    def parse_errors(self) -> int:
        return self.json_errors + self._parser.parse_errors

    @property
    def truncated(self) -> bool:
        """The body stopped inside an event."""
        return self._parser.pending

    def feed(self, chunk: bytes, now: int) -> bool:
        """Consumes one read; returns True once `data: [DONE]` has arrived."""
        self.nbytes += len(chunk)
        self.reads += 1
        before = len(self.chunk_ns)
        chat = self.chat
        add_ns = self.chunk_ns.append
        add_cum = self.chunk_cum.append
        texts = self.texts
        out_at = self.out_at
        for data, name in self._parser.feed(chunk):
            if data == DONE:
                if self.done_ns is None:
                    self.done_ns = now
                continue
            self.events += 1
            if name is not MESSAGE and name == "error":
                self._server_error(data)
                continue
            try:
                obj = _loads(data)
                choices = obj.get("choices")
                if not choices and obj.get("error"):
                    self._server_error(data)
                    continue
                usage = obj.get("usage")
                text = None
                thinking = False
                if choices:
                    c0 = choices[0]
                    finish = c0.get("finish_reason")
                    if finish:
                        self.finish_reason = str(finish)
                    if chat:
                        delta = c0.get("delta")
                        if delta:
                            text = delta.get("content")
                            # Only a delta without content pays for the reasoning lookups
                            # (role-only, reasoning, empty): an answer's chunks do not.
                            if not text:
                                calls = delta.get("tool_calls")
                                if calls:
                                    text = self._tool_delta(calls)
                                else:
                                    text = delta.get("reasoning") or delta.get("reasoning_content")
                                    thinking = bool(text)
                    else:
                        text = c0.get("text")
                    # A tool call's chunk is True: its text is in `calls`, not the answer's.
                    if texts is not None and type(text) is str and text:
                        texts.append(text)
                    if usage and not finish:
                        self.continuous = True
                ct = -1
                if usage:
                    total = usage.get("completion_tokens")
                    self.usage = usage
                    if type(total) is int and total < 0:
                        self._fail("bad_usage", f"usage.completion_tokens is {total}")
                    if choices and self.continuous and type(total) is int:
                        ct = total
                        if ct > self.last_ct:
                            self.last_ct = ct
                            text = True
                    elif choices and finish and not self.chunk_ns and type(total) is int:
                        # Nothing came before the finish, yet usage counts tokens: they all
                        # decoded to "" (a lone 1-token answer does on random-weight models),
                        # so this event is where the first token arrived.
                        text = total > 0
                if text:
                    if thinking:
                        self.reasoning_at.append(len(self.chunk_ns))
                    elif out_at < 0:
                        out_at = len(self.chunk_ns)
                    add_ns(now)
                    add_cum(ct)
            except _MALFORMED:
                self._malformed(data)
        self.out_at = out_at
        if len(self.chunk_ns) - before > 1:
            self.coalesced_reads += 1
        parser = self._parser
        if parser.parse_errors != self._sse_errors:
            self._sse_errors = parser.parse_errors
            if parser.oversized != self._oversized:
                self._oversized = parser.oversized
                self._fail("line_too_long", f"an SSE event over {parser.max_event_bytes} bytes")
            self._fail("malformed_sse", parser.first_error or "malformed SSE")
        if self._limit is not None and max(len(self.chunk_ns), self.last_ct) > self._limit:
            seen = max(len(self.chunk_ns), self.last_ct)
            self._fail(
                "runaway_stream",
                f"{seen} chunks or tokens for max_tokens {self._max_tokens}; stopped reading",
            )
            return True
        return self.done_ns is not None

    def _bad_usage(
        self, prompt: int | None, completion: int, cached: int | None
    ) -> StreamError | None:
        """The error of usage no server can have meant, or None; the record keeps the numbers
        as the server sent them. A few tokens over max_tokens is `over_max_tokens` on an ok
        record; past the runaway limit (10^12 for max_tokens 16) it is not a count at all."""
        if prompt is not None and prompt < 0:
            return StreamError("bad_usage", f"usage.prompt_tokens is {prompt}")
        if self._limit is not None and completion > self._limit:
            return StreamError(
                "bad_usage",
                f"usage.completion_tokens is {completion} for max_tokens {self._max_tokens}",
            )
        if cached is not None and (cached < 0 or (prompt is not None and cached > prompt)):
            return StreamError(
                "bad_usage", f"usage cached_tokens {cached} is not within prompt_tokens {prompt}"
            )
        return None

    def _tool_delta(self, deltas: Any) -> bool:
        """Adds a `delta.tool_calls` event to the answer's calls: an entry with an `id` opens
        a call, later ones extend its name and arguments. True: its tokens are output, so the
        event is a content chunk."""
        if not isinstance(deltas, list):
            raise TypeError("delta.tool_calls is not a list")
        calls = self.calls if self.calls is not None else []
        self.calls = calls
        for d in deltas:
            fn = d.get("function") or {}
            if d.get("id") or not calls:
                calls.append([str(d.get("id") or ""), "", ""])
            call = calls[-1]
            call[1] += str(fn.get("name") or "")
            call[2] += str(fn.get("arguments") or "")
        return True

    def _malformed(self, data: bytes) -> None:
        self.json_errors += 1
        self._fail("malformed_sse", f"invalid JSON in event {self.events}: {data[:80]!r}")

    def _server_error(self, data: bytes) -> None:
        try:
            obj = _loads(data)
        except ValueError:
            obj = None
        err = obj.get("error") if isinstance(obj, dict) else None
        message = err.get("message") if isinstance(err, dict) else err
        text = str(message) if message else data.decode("utf-8", "replace")
        self._fail("server_error_event", text[:300])

    def _fail(self, cls: str, message: str) -> None:
        if self.error is None:
            self.error = StreamError(cls, message)

    @property
    def finished(self) -> bool:
        """The server ended the stream properly: [DONE], or a finish_reason (no-[DONE] servers)."""
        return self.done_ns is not None or self.finish_reason is not None

    def token_counts(self) -> tuple[int, list[int] | None, TokenSource]:
        """completion_tokens, tokens per content chunk (or None), and where they came from."""
        final = _usage_int(self.usage, "completion_tokens")
        cum = self.chunk_cum
        if self.continuous and cum and min(cum) >= 0:
            per, prev = [], 0
            for c in cum:
                per.append(c - prev)
                prev = c
            return max(final or 0, prev), per, "usage_continuous"
        if final is not None:
            return final, None, "usage_final"
        return len(self.chunk_ns), None, "chunk_count"

    def to_record(
        self,
        req: StreamRequest,
        *,
        run_start_ns: int,
        http_status: int | None,
        t_sent: int | None,
        t_headers: int | None,
        t_end: int | None,
        error: StreamError | None,
        loop_lag_max_ns: int | None = None,
        loop_lag_ttft_ns: int | None = None,
        rtt_us: int | None = None,
        response_id: str | None = None,
        phases: dict[str, Any] | None = None,
        replica: int | None = None,
        worker: str | None = None,
        server_wait_ns: int | None = None,
    ) -> StreamRecord:
        """The finished record; absolute perf_counter times become run-clock ns here, except
        `phases` (the HTTP phase fields, records.py), which come on the run clock."""

        def rel(t: int | None) -> int | None:
            return None if t is None else t - run_start_ns

        completion, per_chunk, source = self.token_counts()
        answer = None if self.texts is None else "".join(self.texts)
        ns = [t - run_start_ns for t in self.chunk_ns]
        details = (self.usage or {}).get("prompt_tokens_details")
        cached = _usage_int(details, "cached_tokens") if isinstance(details, dict) else None
        done = (self.usage or {}).get("completion_tokens_details")
        reported = _usage_int(done, "reasoning_tokens") if isinstance(done, dict) else None
        prompt = _usage_int(self.usage, "prompt_tokens")
        if error is None:
            error = self._bad_usage(prompt, completion if source != "chunk_count" else 0, cached)
        return StreamRecord(
            **record_fields(req),
            status="error" if error else "ok",
            error=error,
            prompt_tokens=prompt,
            completion_tokens=completion,
            cached_tokens=cached,
            chunks=len(ns),
            events=self.events,
            bytes=self.nbytes,
            token_source=source,
            finish_reason=self.finish_reason,
            http_status=http_status,
            t_sent_ns=rel(t_sent),
            t_headers_ns=rel(t_headers),
            t_first_ns=ns[0] if ns else None,
            t_last_ns=ns[-1] if ns else None,
            t_done_ns=rel(self.done_ns if self.done_ns is not None else t_end),
            chunk_ns=ns,
            chunk_tokens=per_chunk,
            over_max_tokens=max(0, completion - req.max_tokens) if req.max_tokens else 0,
            parse_errors=self.parse_errors,
            session=req.session,
            turn=req.turn,
            answer=answer,
            needle_hit=None if req.needle is None else needle_hit(req.needle, answer),
            reads=self.reads,
            coalesced_reads=self.coalesced_reads,
            loop_lag_max_ns=loop_lag_max_ns,
            loop_lag_ttft_ns=loop_lag_ttft_ns,
            rtt_us=rtt_us,
            response_id=response_id,
            replica=replica,
            worker=worker,
            server_wait_ns=server_wait_ns,
            tool_calls=len(self.calls or ()),
            calls=None if self.calls is None else tuple((c[0], c[1], c[2]) for c in self.calls),
            **reasoning_fields(ns, per_chunk, self.reasoning_at, self.out_at, reported),
            **(phases or {}),
        )


def reasoning_fields(
    chunk_ns: list[int],
    chunk_tokens: list[int] | None,
    reasoning_at: list[int],
    out_at: int,
    reported: int | None,
) -> dict[str, Any]:
    """The record's reasoning fields from which content chunks were reasoning (their indices)
    and the first output chunk's index (-1: none), as the wall client and the virtual sim see
    them. Reasoning tokens: the server's `completion_tokens_details.reasoning_tokens` where it
    gave one (`usage_details`); else, for a stream that reasoned, the continuous-usage tokens
    of its reasoning chunks (`estimated_usage_continuous`: a chunk that carried both kinds
    counts as output) or one token per reasoning chunk (`estimated_chunk_count`)."""
    tokens, source = reported, "usage_details" if reported is not None else None
    if tokens is None and reasoning_at:
        if chunk_tokens is not None:
            tokens = sum(chunk_tokens[i] for i in reasoning_at)
            source = "estimated_usage_continuous"
        else:
            tokens, source = len(reasoning_at), "estimated_chunk_count"
    return {
        "first_output_chunk": out_at if out_at >= 0 else None,
        "t_first_output_ns": chunk_ns[out_at] if out_at >= 0 else None,
        "reasoning_chunks": len(reasoning_at),
        "t_last_reasoning_ns": chunk_ns[reasoning_at[-1]] if reasoning_at else None,
        "reasoning_tokens": tokens,
        "reasoning_token_source": source,
    }


def _usage_int(usage: dict | None, key: str) -> int | None:
    v = usage.get(key) if usage else None
    return v if type(v) is int else None
