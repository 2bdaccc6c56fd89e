"""A primed prefix sent and proved warm before a rep's measured requests: the prime, its
probe and the greedy repeat (and cold control) built from the plan, judged by engine/cache."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable

from loadgen.engine.cache import ANSWER_TOKENS, GREEDY, prime_and_verify
from loadgen.engine.materialize import materialize
from loadgen.engine.poller import MetricsPoller
from loadgen.engine.probe_cache import PROBE_TAIL_TOKENS
from loadgen.engine.target import Target
from loadgen.records import StreamRecord
from loadgen.request import StreamRequest
from loadgen.run_manifest import CacheCheck
from loadgen.scenario.plan import PlannedRequest, PromptSpec, RepPlan, derive_seed
from loadgen.scenario.prompts import PromptBuilder

# A prime or probe is timed by its first token only.
PRIME_MAX_TOKENS = 1


def probe_request(
    spec: PromptSpec, planned: PlannedRequest, phase: str, rep: int
) -> PlannedRequest:
    """The prime or probe of a primed prefix: the prefix plus a short tail of its own; the
    "repeat" is the prime's prompt again (its greedy answer must equal the prime's), and those
    two answer ANSWER_TOKENS tokens."""
    probe_spec = dataclasses.replace(
        spec,
        tokens=(spec.prefix_tokens or spec.tokens) + PROBE_TAIL_TOKENS,
        text_seed=derive_seed(
            spec.text_seed, "prime" if phase in ("repeat", "control") else phase, rep
        ),
    )
    answer = phase in ("prime", "repeat", "control")
    return dataclasses.replace(
        planned, id=f"{planned.id}-{phase}", phase=phase, prompt=probe_spec,
        max_tokens=ANSWER_TOKENS if answer else PRIME_MAX_TOKENS, min_tokens=None,
    )  # fmt: skip


async def prime_rep(
    rep: RepPlan,
    builder: PromptBuilder,
    send_now: Callable[[StreamRequest], Awaitable[StreamRecord]],
    poller: MetricsPoller,
    model: str,
    target: Target,
    record: Callable[[StreamRecord], None],
) -> list[CacheCheck]:
    checks = []
    for spec in rep.primes:
        planned = next(r for r in rep.requests if r.prompt.prefix_key == spec.prefix_key)

        async def send(
            phase: str, spec: PromptSpec = spec, planned: PlannedRequest = planned
        ) -> StreamRecord:
            probe = probe_request(spec, planned, phase, rep.rep)
            req = await materialize(probe, builder, model=model, t_intended_ns=0)
            if phase in ("prime", "repeat", "control"):
                # Greedy, so the repeat's answer must equal the prime's (a cache that restores
                # wrong state answers otherwise); the control is computed cold again.
                req = dataclasses.replace(
                    req, keep_text=True, extra_body={**req.extra_body, **GREEDY}
                )
            if phase == "control":
                req = dataclasses.replace(req, cache_salt=f"{req.cache_salt or ''}-control")
            rec = await send_now(req)
            record(rec)
            return rec

        async def read_hits() -> float | None:
            sample = await poller.scrape_once()
            return sample.values.get("prefix_cache_hits_total")

        check = await prime_and_verify(
            group=planned.group, rep=rep.rep, prefix_key=spec.prefix_key or "",
            probe_tokens=spec.prefix_tokens or spec.tokens,
            block_size=target.facts.get("block_size"),
            block_size_source=target.fact_sources.get("block_size"),
            send=send, read_hits=read_hits,
        )  # fmt: skip
        checks.append(check)
    return checks
