"""Planned requests become sendable ones: prompts built to size on the target's tokenizer."""

from __future__ import annotations

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
    return StreamRequest(
        id=planned.id,
        model=model,
        prompt=built.text,
        max_tokens=planned.max_tokens,
        api=planned.api,  # type: ignore[arg-type]  # validated by the scenario loader
        group=planned.group,
        rep=planned.rep,
        t_intended_ns=t_intended_ns,
        min_tokens=planned.min_tokens,
        ignore_eos=planned.ignore_eos,
        # A shared dataset row has no salt: nothing to isolate it by.
        cache_salt=planned.prompt.salt or None,
        requested_prompt_tokens=spec.tokens if built.asked is None else built.asked,
        prompt_tokens_sent=built.tokens,
        chat_template_kwargs=planned.chat_template_kwargs,
        phase=planned.phase,
        arm=planned.arm,
        session=planned.session,
        turn=planned.turn,
        cold=planned.prompt.cache == "salted",
        keep_text=code is not None,
        needle=code,
        extra_body=dict(planned.sampling or {}),
    )
