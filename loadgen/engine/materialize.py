"""Planned requests become sendable ones: prompts built to size on the target's tokenizer."""

from __future__ import annotations

from typing import Any

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
