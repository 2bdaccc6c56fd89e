"""TokenizeCounter picks the /tokenize dialect the server really speaks."""

from __future__ import annotations

from typing import Any

import pytest

from loadgen.engine.counters import TokenizeCounter


class LlamaServerTokenize:
    """llama-server's /tokenize: counts `content`, and answers any other body with no tokens."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    async def post_json(self, path: str, body: dict[str, Any]) -> Any:
        self.bodies.append(body)
        return {"tokens": list(range(len(body.get("content", "").split())))}


async def test_an_empty_answer_to_the_vllm_body_selects_the_llamacpp_dialect():
    server = LlamaServerTokenize()
    counter = TokenizeCounter(server, "m")
    assert await counter.count("three short words") == 3
    assert await counter.count("two words") == 2
    assert server.bodies[-1] == {"content": "two words"}


async def test_a_server_that_counts_nothing_is_not_a_tokenizer():
    class Empty:
        async def post_json(self, path: str, body: dict[str, Any]) -> Any:
            return {"tokens": []}

    with pytest.raises(RuntimeError, match="counted 0 tokens"):
        await TokenizeCounter(Empty(), "m").count("some text")
