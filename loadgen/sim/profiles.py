"""Step-time profiles: how long one engine step takes, given what it computes.

    t = fixed_s
      + per_token_s    x tokens scheduled in the step (prefill chunks, decode and draft tokens)
                         (with decode_token_s set: prefill-chunk tokens only, and
      + decode_token_s x decode and draft tokens: on a GPU a decode token is nearly free
                         beside a prefill token, which one slope cannot fit)
and, with min_step_s set, no step is shorter than it: a GPU server whose CPU launches each
step's kernels (vLLM with --enforce-eager) steps no faster than the launches however little
the GPU has to do, while a long prefill chunk hides them behind its compute.
      + decode_ctx_s   x sum over decoding requests of their context (KV read per step)
      + prefill_ctx_s  x sum over prefill chunks of chunk x (context before + chunk / 2)
      + cached_token_s x prefix-cache tokens reused by requests admitted in the step

The prefill term sums to N^2 / 2 over a whole prompt of N tokens, whatever the chunking, so
deep prefill slows per token as attention grows; the decode term makes deep decode slow.
`cached_token_s` prices a warm hit: on the seeds' stack a 72.6k-token prefix hit costs seconds,
not nothing (4090 warm TTFT 3.5-4.9 s, 3090 5.9 s at 96k), and the sized warm-pair probe of
8,640 tokens comes back in 0.64 s; a hit restores state rather than skipping all work.

Calibration (CTX=long, speculation off: the seeds' published per-stream rates are read as
steps per second, one token per step, as the brief directs; block size 16, budget 2048).
Five figures fix the five constants of each card:
  (D1) shallow C1 decode r_s at context c_s:  fixed + per_token + decode_ctx c_s = 1 / r_s
  (D2) deep C1 decode r_d at context c_d:     fixed + per_token + decode_ctx c_d = 1 / r_d
  (P1) cold prefill of N_c tokens in T_c s:   S_c fixed + N_c per_token + N_c^2/2 prefill_ctx = T_c
  (P2) cold prefill of N_p tokens in T_p s:   the same with S_p = ceil(N_p / 2048) steps
  (W)  warm TTFT T_w of an N_c prefix hit:    one step recomputing the r = N_c - B floor((N_c-1)/B)
       uncached tokens (plus, in the C4 mix, the first minnow's chunk of 2048 - r tokens):
       fixed + per_token (tokens) + prefill_ctx (attention work) + cached_token (N_c - r) = T_w
D1 and D2 give decode_ctx and k = fixed + per_token; P1 and P2 (with fixed = k - per_token)
are two linear equations in per_token and prefill_ctx; W then gives cached_token.
Contexts: c_s = 256-token prompt + half of 256 output tokens; c_d = deep prompt + 128.

RTX 4090 (seed 000, wsl2-4090): r_s = 138.0 (CTX ladder, long, prose); r_d = 25.0 at a
72,631-token prompt (25.31 measured "long at depth"); N_c = 72,631 in 65 s (~1,100 tok/s,
whale TTFT 62.6-65.6 s); N_p = 8,640 (the sized probe, 10 x 864-token blocks) cold 4.94 s;
T_w = 4.9 s, the cached whale of the C4 whale + 3 x 4k minnows row, whale first in the queue.
RTX 3090 (seed 002, ubuntu-3090): r_s = 121.1 (long, shallow, C1); r_d = 47.2 at 44k (long,
deep, C1); N_c = 96,370 in 232.9 s (prefix-cache turn 1); N_p = 8,640 cold 7.58 s (the 3090
seat's sized probe, seed 000); T_w = 5.9 s (turn 2), a solo warm request.
The two seeds' deep figures come from different instruments (000's 25.3 is a chunk count,
002's are token counts), so the two cards' decode_ctx are not comparable with each other;
each profile reproduces its own seed. tests/sim/test_sim_profiles.py runs the engine on virtual
time and checks every figure within 15%. The fitted constants are in FITTED below.

Known limit of the linear KV-read term: fitted to 72.6k depth it overcharges shallow batches,
so the 4090 C4 joint-decode aggregate comes out near 250 steps/s against the seed's 517.

`default` is the 4090 profile with every constant divided by 10: the whale_c4 scenario
(72.6k whale + 3 x 4k minnows, 256 output tokens) takes ~8 s instead of ~80 s, with the same
shape (whale prefill still 10x a minnow's, minnows still queued or rationed).
`tiny` is for tests: 2 ms per step plus small slopes; small scenarios end in well under a second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

BUDGET = 2048
BLOCK = 16
SHALLOW_PROMPT = 256
OUTPUT_TOKENS = 256


@dataclass(frozen=True, slots=True)
class StepProfile:
    """Constants of the step-time model (seconds; see the module docstring)."""

    name: str
    fixed_s: float
    per_token_s: float
    decode_ctx_s: float
    prefill_ctx_s: float
    cached_token_s: float = 0.0
    # None: decode tokens cost per_token_s like prefill tokens (the hand-set cards).
    decode_token_s: float | None = None
    # None: no floor under a step (the hand-set cards).
    min_step_s: float | None = None

    def step_s(
        self,
        *,
        scheduled_tokens: int,
        decode_context_tokens: int,
        prefill_attention_work: float,
        restored_tokens: int,
        decode_tokens: int = 0,
    ) -> float:
        if self.decode_token_s is None:
            tokens_s = self.per_token_s * scheduled_tokens
        else:
            tokens_s = (
                self.per_token_s * (scheduled_tokens - decode_tokens)
                + self.decode_token_s * decode_tokens
            )
        t = (
            self.fixed_s
            + tokens_s
            + self.decode_ctx_s * decode_context_tokens
            + self.prefill_ctx_s * prefill_attention_work
            + self.cached_token_s * restored_tokens
        )
        return t if self.min_step_s is None else max(self.min_step_s, t)

    def scaled(self, name: str, factor: float) -> StepProfile:
        """The same shape with every time multiplied by `factor`."""
        return replace(
            self,
            name=name,
            fixed_s=self.fixed_s * factor,
            per_token_s=self.per_token_s * factor,
            decode_ctx_s=self.decode_ctx_s * factor,
            prefill_ctx_s=self.prefill_ctx_s * factor,
            cached_token_s=self.cached_token_s * factor,
            decode_token_s=None if self.decode_token_s is None else self.decode_token_s * factor,
            min_step_s=None if self.min_step_s is None else self.min_step_s * factor,
        )


@dataclass(frozen=True, slots=True)
class SeedFigures:
    """The published figures one long-context profile is fitted to (see module docstring)."""

    shallow_decode_steps_s: float
    deep_decode_steps_s: float
    deep_prompt_tokens: int
    cold_prompt_tokens: int
    cold_ttft_s: float
    probe_prompt_tokens: int
    probe_ttft_s: float
    warm_ttft_s: float
    warm_with_minnow_chunk: bool


RTX4090_LONG = SeedFigures(
    shallow_decode_steps_s=138.0,
    deep_decode_steps_s=25.0,
    deep_prompt_tokens=72_631,
    cold_prompt_tokens=72_631,
    cold_ttft_s=65.0,
    probe_prompt_tokens=8_640,
    probe_ttft_s=4.94,
    warm_ttft_s=4.9,
    warm_with_minnow_chunk=True,
)
RTX3090_LONG = SeedFigures(
    shallow_decode_steps_s=121.1,
    deep_decode_steps_s=47.2,
    deep_prompt_tokens=44_000,
    cold_prompt_tokens=96_370,
    cold_ttft_s=232.9,
    probe_prompt_tokens=8_640,
    probe_ttft_s=7.58,
    warm_ttft_s=5.9,
    warm_with_minnow_chunk=False,
)


def uncached_tail(prompt_tokens: int, block_size: int = BLOCK) -> int:
    """Tokens a full prefix hit still computes: everything after the last reusable block."""
    return prompt_tokens - (prompt_tokens - 1) // block_size * block_size


def fit_long_profile(name: str, f: SeedFigures) -> StepProfile:
    """Solve D1, D2, P1, P2 and W (module docstring) for the five constants."""
    c_s = SHALLOW_PROMPT + OUTPUT_TOKENS / 2
    c_d = f.deep_prompt_tokens + OUTPUT_TOKENS / 2
    decode_ctx = (1 / f.deep_decode_steps_s - 1 / f.shallow_decode_steps_s) / (c_d - c_s)
    k = 1 / f.shallow_decode_steps_s - decode_ctx * c_s  # fixed + per_token

    def prefill_row(n: int, t: float) -> tuple[float, float, float]:
        steps = math.ceil(n / BUDGET)
        # steps (k - per_token) + n per_token + n^2/2 prefill_ctx = t
        return n - steps, n * n / 2, t - steps * k

    a1, b1, y1 = prefill_row(f.cold_prompt_tokens, f.cold_ttft_s)
    a2, b2, y2 = prefill_row(f.probe_prompt_tokens, f.probe_ttft_s)
    det = a1 * b2 - a2 * b1
    per_token = (y1 * b2 - y2 * b1) / det
    prefill_ctx = (a1 * y2 - a2 * y1) / det
    fixed = k - per_token

    n = f.cold_prompt_tokens
    r = uncached_tail(n)
    tokens, work = r, r * (n - r + r / 2)
    if f.warm_with_minnow_chunk:
        minnow_chunk = BUDGET - r
        tokens, work = BUDGET, work + minnow_chunk * minnow_chunk / 2
    rest = f.warm_ttft_s - (fixed + per_token * tokens + prefill_ctx * work)
    cached = rest / (n - r)
    return StepProfile(name, fixed, per_token, decode_ctx, prefill_ctx, cached)


_RTX4090 = fit_long_profile("rtx4090-long", RTX4090_LONG)
_RTX3090 = fit_long_profile("rtx3090-long", RTX3090_LONG)

# The fitted constants, for the record (recomputed from the figures at import):
#   rtx4090-long: fixed 6.55 ms, per_token 524 us, decode_ctx 4.53e-7 s, prefill_ctx 1.01e-8 s,
#                 cached_token 52.2 us
#   rtx3090-long: fixed 7.42 ms, per_token 721 us, decode_ctx 2.96e-7 s, prefill_ctx 3.51e-8 s,
#                 cached_token 61.1 us
FITTED = {p.name: p for p in (_RTX4090, _RTX3090)}

TINY = StepProfile(
    "tiny",
    fixed_s=0.002,
    per_token_s=2e-6,
    decode_ctx_s=2e-9,
    prefill_ctx_s=2e-11,
    cached_token_s=2e-7,
)
SIM_PROFILES: dict[str, StepProfile] = {
    "tiny": TINY,
    "default": _RTX4090.scaled("default", 0.1),
    **FITTED,
}


def sim_profile(name: str) -> StepProfile:
    try:
        return SIM_PROFILES[name]
    except KeyError:
        raise ValueError(
            f"unknown sim profile {name!r}; valid profiles: {', '.join(sorted(SIM_PROFILES))}"
        ) from None
