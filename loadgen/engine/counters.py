"""Token counters for sizing prompts on the target's own tokenizer.

Preference: the server's /tokenize (exact; vLLM takes {"prompt"} or {"messages"}, llama.cpp
takes {"content"}), else an estimate that the run labels as such. A chat prompt is counted
with its template applied, because the template's tokens are prompt tokens too.
"""

from __future__ import annotations

from typing import Any, Protocol

from loadgen.client.errors import ServerUnreachable
from loadgen.scenario.prompts import EstimateCounter


class JsonPoster(Protocol):
    async def post_json(self, path: str, body: dict[str, Any]) -> Any: ...


class TokenizeCounter:
    """Counts through the server's /tokenize, in whichever dialect the server answered first."""

    method = "tokenize"

    def __init__(
        self,
        client: JsonPoster,
        model: str,
        *,
        chat: bool = False,
        chat_template_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self._client = client
        self._model = model
        self._chat = chat
        self._template_kwargs = chat_template_kwargs
        self._dialect: str | None = None

    async def count(self, text: str) -> int:
        if self._dialect is None:
            return await self._detect_and_count(text)
        return await self._count_in(self._dialect, text)

    async def _detect_and_count(self, text: str) -> int:
        errors = []
        for dialect in ("vllm", "llamacpp"):
            try:
                n = await self._count_in(dialect, text)
            except ServerUnreachable:
                raise  # no server at all: not a tokenizer question
            except Exception as exc:  # a dialect the server does not speak
                errors.append(f"{dialect}: {exc}")
                continue
            if n == 0 and text:
                # llama-server answers vLLM's body (no "content") with {"tokens": []}.
                errors.append(f"{dialect}: counted 0 tokens in {len(text)} characters")
                continue
            self._dialect = dialect
            return n
        raise RuntimeError("/tokenize is not usable: " + "; ".join(errors))

    async def _count_in(self, dialect: str, text: str) -> int:
        if dialect == "vllm":
            body: dict[str, Any] = {"model": self._model}
            if self._chat:
                body["messages"] = [{"role": "user", "content": text}]
                body["add_generation_prompt"] = True
                if self._template_kwargs:
                    body["chat_template_kwargs"] = self._template_kwargs
            else:
                body["prompt"] = text
            reply = await self._client.post_json("/tokenize", body)
            return int(reply["count"]) if "count" in reply else len(reply["tokens"])
        if self._chat:
            raise RuntimeError("llama.cpp /tokenize cannot apply a chat template")
        reply = await self._client.post_json("/tokenize", {"content": text})
        return len(reply["tokens"])


async def pick_counter(
    client: JsonPoster,
    model: str,
    *,
    chat: bool,
    chat_template_kwargs: dict[str, Any] | None,
    warn: Any,
) -> TokenizeCounter | EstimateCounter:
    """The exact counter if the server's /tokenize answers, else the labelled estimate."""
    counter = TokenizeCounter(client, model, chat=chat, chat_template_kwargs=chat_template_kwargs)
    try:
        await counter.count("hello world")
    except ServerUnreachable:
        raise
    except Exception as exc:
        warn(f"prompt sizing: {exc}; prompt token counts are ESTIMATED (4 characters a token)")
        return EstimateCounter()
    return counter
