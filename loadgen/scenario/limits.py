"""Upper bounds checked before any work starts, all stated here.

A plan too large to finish, a prompt longer than the target's window, or a YAML file whose
aliases expand without end would otherwise pass `validate` and then hang while memory grows.

- MAX_STREAMS: requests of a whole run (every arm, rep and warmup). Override with the
  environment variable LOADGEN_MAX_STREAMS.
- MAX_PROMPT_TOKENS: the longest prompt any scenario may ask for, whatever the target. Override
  with LOADGEN_MAX_PROMPT_TOKENS.
- MAX_YAML_NODES: values of a scenario file after alias expansion (no override: no scenario
  comes near it, a billion-laughs file goes far past it).
- A request's prompt plus max_tokens must fit the target's window: the sim's max_model_len
  (SIM_MAX_MODEL_LEN unless the scenario's `sim:` block sets one), or an external server's
  `max_model_len` from /v1/models when it gives one (checked at run start).
"""

from __future__ import annotations

import math
import os

from loadgen.scenario.model import DURATION_REQUEST_CAP, Closed, Gamma, Poisson, Scenario, Trace

MAX_STREAMS = int(os.environ.get("LOADGEN_MAX_STREAMS", 100_000))
MAX_PROMPT_TOKENS = int(os.environ.get("LOADGEN_MAX_PROMPT_TOKENS", 1 << 20))
MAX_YAML_NODES = 100_000
SIM_MAX_MODEL_LEN = 8192


def planned_streams(s: Scenario) -> int:
    """Requests one arm of `s` sends: warmup plus every rep (an upper bound under a duration)."""
    a = s.arrival
    per_rep = sum(g.count for g in s.groups)
    if isinstance(a, Trace):
        per_rep = len(a.rows)
    elif isinstance(a, Closed | Poisson | Gamma):
        per_rep = _open_count(a, per_rep)
    return s.warmup.count + s.repetitions * per_rep


def _open_count(a: Closed | Poisson | Gamma, per_rep: int) -> int:
    if a.count is not None:
        return a.count
    if a.duration_s is None:
        return per_rep
    if isinstance(a, Closed):
        return DURATION_REQUEST_CAP
    return math.ceil(a.rate_per_s * a.duration_s) + 1


def largest_requests(s: Scenario) -> list[tuple[str, int, int]]:
    """(what, prompt tokens, prompt + max_tokens) of each request shape of `s`, largest first."""
    out = [
        (f"groups.{g.name}", g.prompt.tokens, g.prompt.tokens + (g.max_tokens or 0))
        for g in s.groups
        if g.prompt.tokens is not None
    ]
    if isinstance(s.arrival, Trace) and s.arrival.rows:
        row = max(s.arrival.rows, key=lambda r: r.input_tokens + r.output_tokens)
        out.append(("arrival.trace", row.input_tokens, row.input_tokens + row.output_tokens))
    return sorted(out, key=lambda x: -x[2])


def sim_window(s: Scenario) -> int:
    """The built-in sim's max_model_len for this scenario."""
    return (s.sim.max_model_len if s.sim else None) or SIM_MAX_MODEL_LEN


def window_problem(s: Scenario, window: int, target: str) -> str | None:
    """Why a request of `s` cannot run on a target with context window `window`, or None."""
    for what, prompt, total in largest_requests(s):
        if total > window:
            return (
                f"{what}: prompt {prompt} + max_tokens {total - prompt} = {total} tokens exceeds "
                f"{target}'s max_model_len {window} (expected a smaller prompt or max_tokens)"
            )
    return None


def size_problems(arms: list[Scenario]) -> list[str]:
    """Plan-size and prompt-size limits broken by the arms of a scenario, one line each."""
    problems = []
    total = sum(planned_streams(s) for s in arms)
    if total > MAX_STREAMS:
        problems.append(
            f"plan: {total} requests (count x repetitions x arms, warmup included) exceed the "
            f"limit of {MAX_STREAMS} (expected fewer; set LOADGEN_MAX_STREAMS to allow more)"
        )
    for what, prompt, _ in largest_requests(arms[0]) if arms else []:
        if prompt > MAX_PROMPT_TOKENS:
            problems.append(
                f"{what}: a prompt of {prompt} tokens exceeds the limit of {MAX_PROMPT_TOKENS} "
                "(expected fewer; set LOADGEN_MAX_PROMPT_TOKENS to allow more)"
            )
            break
    return problems
