"""The OpenAI wire format as vLLM v1 speaks it: request parsing and response shaping.

Shapes follow vLLM's serving_completion / serving_chat: one SSE event per engine step that
produced tokens (under speculative decoding one event carries the whole step), a role-only first
chat delta, cumulative `usage` on every chunk with `continuous_usage_stats`, a final `choices: []`
usage chunk with `include_usage`, then `data: [DONE]`. The sim always adds
`usage.prompt_tokens_details.cached_tokens` to final usage (vLLM does so only with
`--enable-prompt-tokens-details`), so clients can read the prefix-cache hit per request.
A chat request with `tools` (and a `tool_choice` other than "none") is answered with one call
of its first function, as vLLM's tool parsers stream it: `delta.tool_calls` events whose
`function.arguments` pieces make `{"query": "<the generated text>"}`, finish_reason
"tool_calls".
With `reasoning_tokens` N, a chat answer's first N tokens stream as `delta.reasoning` (vLLM's
reasoning parsers; a step that crosses the boundary carries both keys) and final usage gains
`completion_tokens_details.reasoning_tokens`.
Errors are `{"error": {"message", "type", "param", "code"}}` with the HTTP status as `code`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson

Api = Literal["completions", "chat"]

DONE = b"data: [DONE]\n\n"
SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}

_ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    429: "TooManyRequestsError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


class WireError(Exception):
    """A request the server answers with an error body instead of a completion."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def body(self) -> dict[str, Any]:
        return error_body(self.status, self.message, self.param)


def error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    err_type = _ERROR_TYPES.get(status, "BadRequestError")
    return {"error": {"message": message, "type": err_type, "param": param, "code": status}}


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    """One validated completions or chat request, before tokenization.

    Exactly one of `prompt_text`, `prompt_token_ids` and `messages` is set.
    """

    api: Api
    model: str
    prompt_text: str | None
    prompt_token_ids: list[int] | None
    messages: list[dict[str, str]] | None
    chat_template_kwargs: dict[str, Any] | None
    max_tokens: int | None
    min_tokens: int
    ignore_eos: bool
    cache_salt: str | None
    stream: bool
    include_usage: bool
    continuous_usage: bool
    client_request_id: str | None
    # The function a tool-calling answer calls (None: the answer is text).
    tool: str | None = None


def parse_json_object(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise WireError(400, f"request body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise WireError(400, "request body must be a JSON object")
    return body


def parse_request(api: Api, raw: bytes, default_model: str) -> ParsedRequest:
    """Parses and validates a request body; raises WireError(400) naming the bad field."""
    return parse_body(api, parse_json_object(raw), default_model)


def parse_body(api: Api, body: dict[str, Any], default_model: str) -> ParsedRequest:
    prompt_text, prompt_ids, messages = None, None, None
    if api == "completions":
        prompt_text, prompt_ids = _parse_prompt(body.get("prompt"))
    else:
        messages = chat_messages(body.get("messages"))
    max_tokens = _optional_int(body, "max_completion_tokens" if api == "chat" else "max_tokens")
    if max_tokens is None and api == "chat":
        max_tokens = _optional_int(body, "max_tokens")
    if max_tokens is not None and max_tokens < 1:
        raise WireError(400, f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens")
    min_tokens = _optional_int(body, "min_tokens") or 0
    if min_tokens < 0:
        raise WireError(400, f"min_tokens must be >= 0, got {min_tokens}.", "min_tokens")
    if max_tokens is not None and min_tokens > max_tokens:
        raise WireError(
            400,
            f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}.",
            "min_tokens",
        )
    if body.get("n", 1) != 1:
        raise WireError(400, "the sim serves one choice per request (n=1)", "n")
    stream = _bool(body, "stream")
    include_usage, continuous = _stream_options(body.get("stream_options"), stream)
    return ParsedRequest(
        api=api,
        model=_model(body, default_model),
        prompt_text=prompt_text,
        prompt_token_ids=prompt_ids,
        messages=messages,
        chat_template_kwargs=_optional_dict(body, "chat_template_kwargs"),
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        ignore_eos=_bool(body, "ignore_eos"),
        cache_salt=_cache_salt(body.get("cache_salt")),
        stream=stream,
        include_usage=include_usage,
        continuous_usage=continuous,
        client_request_id=_optional_str(body, "request_id"),
        tool=tool_to_call(body) if api == "chat" else None,
    )


def tool_to_call(body: Mapping[str, Any]) -> str | None:
    """The function a chat answer calls: the first of `tools`, unless tool_choice is "none"."""
    tools = body.get("tools")
    if not tools or body.get("tool_choice") == "none":
        return None
    if not isinstance(tools, list) or not isinstance(tools[0], dict):
        raise WireError(400, "tools must be a list of tool objects", "tools")
    name = (tools[0].get("function") or {}).get("name")
    if not isinstance(name, str) or not name:
        raise WireError(400, "tools[0].function.name must be a non-empty string", "tools")
    return name


def tool_call(request_id: str, name: str, arguments: str) -> dict[str, Any]:
    """The call object of a request's answer (one call a request: its id is the request's)."""
    return {"id": call_id(request_id), "type": "function",
            "function": {"name": name, "arguments": arguments}}  # fmt: skip


def call_id(request_id: str) -> str:
    return f"call-{request_id}"


def tool_arguments(text: str, *, first: bool, last: bool) -> str:
    """One piece of a tool call's arguments: the generated text JSON-escaped, opened by the
    first piece and closed by the last, so the pieces join into `{"query": "..."}`."""
    piece = orjson.dumps(text).decode()[1:-1]
    return ('{"query": "' if first else "") + piece + ('"}' if last else "")


def parse_tokenize(body: dict[str, Any], default_model: str) -> ParsedRequest:
    """A /tokenize body: `{"prompt": str}` or `{"messages": [...]}` (chat template applied)."""
    if "messages" in body:
        return parse_body("chat", body, default_model)
    if not isinstance(body.get("prompt"), str):
        raise WireError(400, "tokenize needs a string 'prompt' or a 'messages' list", "prompt")
    return parse_body("completions", body, default_model)


def parse_detokenize(body: dict[str, Any]) -> list[int]:
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not all(_is_int(t) for t in tokens):
        raise WireError(400, "detokenize needs 'tokens', a list of token ids", "tokens")
    return tokens


def resolve_max_tokens(max_tokens: int | None, prompt_len: int, max_model_len: int) -> int:
    """max_tokens checked against the context window as vLLM does (None: fill the window)."""
    if prompt_len == 0:
        raise WireError(400, "The decoder prompt cannot be empty", "prompt")
    if prompt_len >= max_model_len:
        raise WireError(
            400,
            f"The decoder prompt (length {prompt_len}) is longer than the maximum model length "
            f"of {max_model_len}. Make sure that `max_model_len` is no smaller than the number "
            "of text tokens.",
            "prompt",
        )
    if max_tokens is None:
        return max_model_len - prompt_len
    if prompt_len + max_tokens > max_model_len:
        raise WireError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, you "
            f"requested {prompt_len + max_tokens} tokens ({prompt_len} in the messages, "
            f"{max_tokens} in the completion). Please reduce the length of the messages or "
            "completion.",
            "max_tokens",
        )
    return max_tokens


def model_list(model: str, max_model_len: int, created: int) -> dict[str, Any]:
    """The /v1/models body, one card as vLLM serves it."""
    card = {
        "id": model,
        "object": "model",
        "created": created,
        "owned_by": "vllm",
        "root": model,
        "parent": None,
        "max_model_len": max_model_len,
    }
    return {"object": "list", "data": [card]}


def _model(body: dict[str, Any], default_model: str) -> str:
    model = body.get("model")
    if model is None:
        return default_model
    if not isinstance(model, str):
        raise WireError(400, "model must be a string", "model")
    return model


def _parse_prompt(prompt: Any) -> tuple[str | None, list[int] | None]:
    # A one-element batch is the same prompt; real batches are out of the sim's scope.
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt, None
    if isinstance(prompt, list) and prompt and all(_is_int(t) for t in prompt):
        if any(t < 0 for t in prompt):
            raise WireError(400, "prompt token ids must be non-negative", "prompt")
        return None, list(prompt)
    if isinstance(prompt, list) and len(prompt) > 1:
        raise WireError(400, "the sim serves one prompt per request, not a batch", "prompt")
    raise WireError(400, "prompt must be a string or a non-empty list of token ids", "prompt")


def chat_messages(messages: Any) -> list[dict[str, str]]:
    """The messages as the chat template reads them (role and text; an assistant's tool calls
    as their arguments); raises WireError(400) naming a bad one."""
    if not isinstance(messages, list) or not messages:
        raise WireError(400, "messages must be a non-empty list", "messages")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise WireError(400, f"messages[{i}] needs a string 'role'", "messages")
        content = m.get("content")
        if content is None and m.get("tool_calls"):
            content = _calls_text(m["tool_calls"], i)
        out.append({"role": m["role"], "content": _message_text(content, i)})
    return out


def _calls_text(calls: Any, i: int) -> str:
    """An assistant message's tool calls as the template renders them: their arguments."""
    if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
        raise WireError(400, f"messages[{i}].tool_calls must be a list of calls", "messages")
    return "".join(str((c.get("function") or {}).get("arguments") or "") for c in calls)


def _message_text(content: Any, i: int) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        parts = [
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        ]
        return "\n".join(parts)
    raise WireError(400, f"messages[{i}].content must be a string or a list of parts", "messages")


def _stream_options(options: Any, stream: bool) -> tuple[bool, bool]:
    if options is None:
        return False, False
    if not isinstance(options, dict):
        raise WireError(400, "stream_options must be an object", "stream_options")
    if not stream:
        raise WireError(400, "Stream options can only be defined when `stream=True`.")
    include = bool(options.get("include_usage"))
    # As vLLM: continuous usage only counts when include_usage is on too.
    return include, include and bool(options.get("continuous_usage_stats"))


def _cache_salt(salt: Any) -> str | None:
    if salt is None:
        return None
    if not isinstance(salt, str) or not salt:
        raise WireError(400, "Parameter 'cache_salt' must be a non-empty string if provided.")
    return salt


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _optional_int(body: dict[str, Any], key: str) -> int | None:
    v = body.get(key)
    if v is None:
        return None
    if not _is_int(v):
        raise WireError(400, f"{key} must be an integer, got {v!r}", key)
    return v


def _optional_str(body: dict[str, Any], key: str) -> str | None:
    v = body.get(key)
    if v is not None and not isinstance(v, str):
        raise WireError(400, f"{key} must be a string", key)
    return v


def _optional_dict(body: dict[str, Any], key: str) -> dict[str, Any] | None:
    v = body.get(key)
    if v is not None and not isinstance(v, dict):
        raise WireError(400, f"{key} must be an object", key)
    return v


def _bool(body: dict[str, Any], key: str) -> bool:
    v = body.get(key, False)
    if not isinstance(v, bool):
        raise WireError(400, f"{key} must be true or false", key)
    return v


def sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def final_usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
    return {
        **usage(prompt_tokens, completion_tokens),
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


@dataclass(frozen=True, slots=True)
class ResponseShaper:
    """Builds the response objects of one request: stream chunks or the whole response."""

    api: Api
    request_id: str
    created: int
    model: str
    prompt_tokens: int
    continuous_usage: bool
    reasoning_tokens: int = 0
    tool: str | None = None

    def _head(self, obj_type: str) -> dict[str, Any]:
        return {
            "id": self.request_id,
            "object": obj_type,
            "created": self.created,
            "model": self.model,
        }

    @property
    def _chunk_type(self) -> str:
        return "text_completion" if self.api == "completions" else "chat.completion.chunk"

    def role_chunk(self) -> bytes | None:
        """The chat stream's first event, a role-only delta (None for completions)."""
        if self.api != "chat":
            return None
        choice = {
            "index": 0,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": None,
            "finish_reason": None,
        }
        obj = {**self._head(self._chunk_type), "choices": [choice]}
        if self.continuous_usage:
            obj["usage"] = usage(self.prompt_tokens, 0)
        return sse(obj)

    def content_chunk(
        self,
        text: str | None,
        finish_reason: str | None,
        completion_tokens: int,
        reasoning: str | None = None,
        first: bool = False,
    ) -> bytes:
        """One engine step's tokens as one event; `completion_tokens` is cumulative. A chat
        step's reasoning part goes in `delta.reasoning`, its answer part in `delta.content`."""
        if self.api == "completions":
            choice = _completion_choice(text or "", finish_reason)
        else:
            delta: dict[str, Any] = {"reasoning": reasoning} if reasoning is not None else {}
            if self.tool is not None:
                delta = {"tool_calls": [self._call_delta(text or "", first, finish_reason)]}
                finish_reason = finish_reason and "tool_calls"
            elif text is not None or reasoning is None:
                delta["content"] = text or ""
            choice = {
                "index": 0,
                "delta": delta,
                "logprobs": None,
                "finish_reason": finish_reason,
            }
            if finish_reason is not None:
                choice["stop_reason"] = None
        obj = {**self._head(self._chunk_type), "choices": [choice]}
        if self.continuous_usage:
            obj["usage"] = usage(self.prompt_tokens, completion_tokens)
        return sse(obj)

    def _call_delta(self, text: str, first: bool, finish: str | None) -> dict[str, Any]:
        """A step's piece of the call: the first opens it (id, name), the rest extend it."""
        args = tool_arguments(text, first=first, last=finish is not None)
        if first and self.tool is not None:
            return {"index": 0, **tool_call(self.request_id, self.tool, args)}
        return {"index": 0, "function": {"arguments": args}}

    def usage_chunk(self, completion_tokens: int, cached_tokens: int) -> bytes:
        obj = {
            **self._head(self._chunk_type),
            "choices": [],
            "usage": final_usage(self.prompt_tokens, completion_tokens, cached_tokens),
        }
        if self.reasoning_tokens:
            details = {"reasoning_tokens": min(self.reasoning_tokens, completion_tokens)}
            obj["usage"]["completion_tokens_details"] = details
        return sse(obj)

    def full_response(
        self, text: str, finish_reason: str | None, completion_tokens: int, cached_tokens: int
    ) -> dict[str, Any]:
        """The non-streaming response body."""
        if self.api == "completions":
            head = self._head("text_completion")
            choice = _completion_choice(text, finish_reason) | {"prompt_logprobs": None}
        else:
            head = self._head("chat.completion")
            message: dict[str, Any] = {"role": "assistant", "content": text, "tool_calls": []}
            if self.tool is not None:
                args = tool_arguments(text, first=True, last=True)
                call = tool_call(self.request_id, self.tool, args)
                message = {"role": "assistant", "content": None, "tool_calls": [call]}
                finish_reason = finish_reason and "tool_calls"
            choice = {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
            }
        return {
            **head,
            "choices": [choice],
            "usage": final_usage(self.prompt_tokens, completion_tokens, cached_tokens),
        }


def reasoning_split(done_before: int, n: int, reasoning_tokens: int) -> int:
    """How many of a step's n tokens, after done_before earlier ones, are reasoning."""
    return max(0, min(n, reasoning_tokens - done_before))


def _completion_choice(text: str, finish_reason: str | None) -> dict[str, Any]:
    """A /v1/completions choice as vLLM shapes it, streamed or whole."""
    return {
        "index": 0,
        "text": text,
        "logprobs": None,
        "finish_reason": finish_reason,
        "stop_reason": None,
    }
