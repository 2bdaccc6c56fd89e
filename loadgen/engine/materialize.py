"""Planned requests become sendable ones: prompts built to size on the target's tokenizer."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, cast

from loadgen.needle import needle_code
from loadgen.request import StreamRequest
from loadgen.scenario.plan import PlannedRequest
from loadgen.scenario.prompts import PromptBuilder


async def materialize(
    planned: PlannedRequest, builder: PromptBuilder, *, model: str, t_intended_ns: int
) -> StreamRequest:
    """The request to send for `planned`, intended at `t_intended_ns` on the run clock.

    The salt opens the prompt text and also goes out as vLLM's `cache_salt`, so a server that
    takes it isolates the stream twice over; shared and primed streams share their salt."""
    built = await builder.build(planned.prompt)
    spec = planned.prompt
    code = None if spec.needle_key is None else needle_code(spec.text_seed)
    return as_planned(
        planned,
        model=model,
        t_intended_ns=t_intended_ns,
        id=planned.id,
        prompt=built.text,
        max_tokens=planned.max_tokens,
        # A shared dataset row has no salt: nothing to isolate it by.
        cache_salt=planned.prompt.salt or None,
        requested_prompt_tokens=spec.tokens if built.asked is None else built.asked,
        prompt_tokens_sent=built.tokens,
        session=planned.session,
        turn=planned.turn,
        cold=planned.prompt.cache == "salted",
        keep_text=code is not None,
        needle=code,
        extra_body=dict(planned.sampling or {}),
    )


# Prompts sized at once: a server's /tokenize is a round trip per count (5.5 counts a 256-token
# prompt), so one prompt at a time leaves client and server idle between the answers. 1,000
# such prompts on 2 cores: llama-server 2.30 s one at a time, 1.51 s 32 at a time; vLLM's CPU
# build 8.2 and 7.1 s (its one API process is the bound).
SIZING_IN_FLIGHT = 32
# Prompts sized between turns of the loop, all sizers together. A counter that never waits (the
# estimate, the sim's tokenizer) would otherwise hold the loop for the whole rep: 27 s for a
# million prompts, in which Ctrl-C went unanswered and a /metrics scrape timed out. Every sizer
# ready runs in one turn, so each gives the loop its turn after its share.
SIZED_BETWEEN_TURNS = 256
_SIZED_BY_ONE = SIZED_BETWEEN_TURNS // SIZING_IN_FLIGHT


async def materialize_all(
    planned: Sequence[PlannedRequest], builder: PromptBuilder, *, model: str
) -> list[StreamRequest]:
    """materialize() of every planned request (intended at 0), in their order, up to
    SIZING_IN_FLIGHT at once. Each prompt starts from the density learned before the call, so
    its text is the same whatever order the counts come back in; with a counter whose count
    grows with every word (a tokenizer), it is the text one at a time would build. A shared
    prefix is fitted once."""
    built: list[StreamRequest | None] = [None] * len(planned)
    todo = iter(enumerate(planned))

    async def size_next() -> None:
        for sized, (i, p) in enumerate(todo, 1):
            built[i] = await materialize(p, builder, model=model, t_intended_ns=0)
            if sized % _SIZED_BY_ONE == 0:
                await asyncio.sleep(0)

    with builder.density_held():
        sizers = [asyncio.ensure_future(size_next()) for _ in range(SIZING_IN_FLIGHT)]
        try:
            await asyncio.gather(*sizers)
        except BaseException:
            # One failed (a prompt that cannot be sized) or the run stopped: the others stop.
            for s in sizers:
                s.cancel()
            await asyncio.gather(*sizers, return_exceptions=True)
            raise
    return cast(list[StreamRequest], built)


def as_planned(
    planned: PlannedRequest, *, model: str, t_intended_ns: int, **own: Any
) -> StreamRequest:
    """A request as `planned` places it (arm, group, rep, phase) and what it asks of the server
    as planned (api, min_tokens, ignore_eos, chat template); `own`: the fields its sender
    builds (id, prompt, max_tokens, salt, ...), a plain request's or a session turn's."""
    return StreamRequest(
        model=model,
        t_intended_ns=t_intended_ns,
        api=planned.api,  # type: ignore[arg-type]  # validated by the scenario loader
        arm=planned.arm,
        group=planned.group,
        rep=planned.rep,
        phase=planned.phase,
        min_tokens=planned.min_tokens,
        ignore_eos=planned.ignore_eos,
        chat_template_kwargs=planned.chat_template_kwargs,
        **own,
    )
