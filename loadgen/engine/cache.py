"""Priming a shared prefix and proving the cache is warm before anything is measured.

The seeds' lesson: a boot can serve correctly and never hit its prefix cache, and a probe that
spans one block or less reuses nothing even on a healthy boot ((blocks - 1) x B is what can
match). So the probe spans at least MIN_PROBE_BLOCKS blocks of the size the server chose.

One rule judges every probe (probe-cache, the sweep's per-boot check, a primed group): where
the server counts prefix-cache hits, the counter decides (hits delta >= the reusable blocks'
tokens) and the TTFT ratio is a second witness; where it does not, the TTFT ratio decides. On an
H200 a 2048-token probe read warm 0.126 s vs cold 0.094 s while the server counted all 2048
tokens as hits: a prefill of 50 ms is inside a request's fixed cost, so TTFT alone cried wolf.
A third send repeats the cold prompt under greedy decoding: its answer must equal the cold one
(a cache that returns wrong state is worse than a dead one).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from loadgen.analysis.rates import ttft_s
from loadgen.records import StreamRecord
from loadgen.run_manifest import CacheCheck, CacheVerdict

MIN_PROBE_BLOCKS = 10
WARM_TTFT_RATIO = 0.5
# The TTFT ratio tells only when cold TTFT is this many times a tiny request's TTFT (the floor
# of fixed per-request cost); below it the ratio is noise (the H200's 0.094 s cold at ~15 ms).
FLOOR_MULTIPLE = 20
# Tokens of the greedy answer compared cold vs warm, and the fixed sampling it is asked with.
ANSWER_TOKENS = 16
GREEDY = {"temperature": 0, "seed": 0}


@dataclass(frozen=True, slots=True)
class Judgement:
    warm: bool
    verdict: CacheVerdict
    decided_by: str
    reason: str


def probe_blind_reason(probe_tokens: int, block_size: int | None) -> str | None:
    """Why a probe of this size cannot show a warm cache, or None if it can."""
    if block_size is None:
        return None
    if probe_tokens < MIN_PROBE_BLOCKS * block_size:
        return (
            f"probe of {probe_tokens} tokens spans {probe_tokens // block_size} blocks of "
            f"{block_size} (< {MIN_PROBE_BLOCKS}): too small to show reuse"
        )
    return None


def reusable_tokens(probe_tokens: int, block_size: int | None) -> int:
    """Prefix tokens a warm send must hit: (blocks - 1) x B (the last block may straddle the
    tail's tokenization or be dropped by a drafter, as vLLM does for EAGLE); 1 if B unknown."""
    if block_size is None:
        return 1
    return max(1, (probe_tokens // block_size - 1) * block_size)


def ttft_witness(cold_t: float, warm_t: float, floor_s: float | None) -> tuple[bool, bool, str]:
    """(fast, telling, words): warm under half of cold, and whether cold stands far enough
    above the TTFT floor for the ratio to mean anything."""
    fast = warm_t < WARM_TTFT_RATIO * cold_t
    words = f"warm TTFT {warm_t:.3f}s vs cold {cold_t:.3f}s"
    if floor_s is not None and cold_t < FLOOR_MULTIPLE * floor_s:
        multiple = cold_t / floor_s if floor_s > 0 else float("inf")
        return fast, False, (f"{words} (not telling: cold is {multiple:.1f}x the "
                             f"{floor_s * 1000:.1f} ms floor, < {FLOOR_MULTIPLE}x)")  # fmt: skip
    return fast, True, f"{words} ({'under' if fast else 'not under'} half)"


def warm_verdict(
    cold: StreamRecord,
    warm: StreamRecord,
    hits_delta: float | None,
    *,
    probe_tokens: int,
    block_size: int | None,
    floor_s: float | None = None,
) -> Judgement:
    """The one rule: the hit counter decides where the server has one (delta >= the reusable
    blocks' tokens), the TTFT ratio otherwise; a dead verdict names both witnesses."""
    cold_t, warm_t = ttft_s(cold), ttft_s(warm)
    if cold.status != "ok" or warm.status != "ok" or cold_t is None or warm_t is None:
        return Judgement(False, "dead", "failed", "a priming stream failed")
    fast, telling, ttft_words = ttft_witness(cold_t, warm_t, floor_s)
    if (cold.cached_tokens or 0) >= (block_size or 1):
        # A prime primed once per group is served warm from the second rep on: its TTFT is no
        # cold reference, and "warm 0.384s vs cold 0.384s, disagrees" was read on every rep.
        telling = False
        ttft_words = (f"no cold reference (the prime itself hit {cold.cached_tokens} cached "
                      "tokens)")  # fmt: skip
    if hits_delta is None:
        counters = "server reports no prefix-hit counter"
        if not telling:
            return Judgement(False, "inconclusive", "none", f"{counters}; {ttft_words}")
        state: CacheVerdict = "healthy" if fast else "dead"
        return Judgement(fast, state, "ttft", f"decided by TTFT ({counters}): {ttft_words}")
    need = reusable_tokens(probe_tokens, block_size)
    hit = hits_delta >= need
    counted = f"prefix-cache hits +{hits_delta:.0f} tokens ({'>=' if hit else '<'} {need} reusable)"
    witness = ttft_words + (", disagrees" if telling and fast != hit else "")
    state = "healthy" if hit else "dead"
    return Judgement(hit, state, "counters", f"decided by counters: {counted}; TTFT: {witness}")


def answers_words(cold: StreamRecord, repeat: StreamRecord) -> tuple[bool | None, str]:
    """Whether the greedy answer of the repeat equals the cold one (None: not comparable)."""
    if cold.status != "ok" or repeat.status != "ok" or cold.answer is None or repeat.answer is None:
        return None, "answers not compared (a stream failed or kept no text)"
    if cold.answer == repeat.answer:
        return True, f"warm answer = cold ({len(cold.answer)} chars, greedy)"
    return False, (f"CACHE CORRECTNESS FAILURE: warm answer {repeat.answer[:40]!r} != cold "
                   f"{cold.answer[:40]!r} under greedy decoding")  # fmt: skip


def control_words(
    cold: StreamRecord, control: StreamRecord, mismatch: str
) -> tuple[bool | None, str]:
    """Whether a warm answer that differs from the cold one convicts the cache: the control is
    the cold prompt again under another cache_salt (so computed cold again). It answering
    as the cold did convicts (False); answering otherwise leaves greedy decoding itself
    unreproducible here, so the answers cannot judge the cache (None)."""
    reproduced, _ = answers_words(cold, control)
    if reproduced:
        return False, f"{mismatch}; a cold control answered as the cold did"
    return None, (
        "answers not judged: greedy decoding does not reproduce here (warm and a cold control, "
        f"the same prompt under another cache_salt, both differ from cold: {control.answer!r:.40})"
    )


async def prime_and_verify(
    *,
    group: str,
    rep: int,
    prefix_key: str,
    probe_tokens: int,
    block_size: int | None,
    block_size_source: str | None,
    send: Callable[[str], Awaitable[StreamRecord]],
    read_hits: Callable[[], Awaitable[float | None]],
    floor_s: float | None = None,
    compare_answers: bool = True,
) -> CacheCheck:
    """Sends the prefix cold ("prime"), then again with another tail ("probe"), then the prime's
    own prompt again ("repeat", greedy: its answer must equal the prime's; where it does not,
    "control": the prime's prompt under another cache_salt, computed cold), and judges.

    `send(phase)` streams the prefix with a short tail and returns its record (the "repeat"
    sends the prime's prompt); `read_hits()` returns the server's prefix_cache_hits_total
    (None if not exported).
    """
    blind = probe_blind_reason(probe_tokens, block_size)
    cold = await send("prime")
    before = await read_hits()
    warm = await send("probe")
    after = await read_hits()
    hits_delta = None if before is None or after is None else after - before
    judged = warm_verdict(
        cold, warm, hits_delta, probe_tokens=probe_tokens, block_size=block_size,
        floor_s=floor_s,
    )  # fmt: skip
    if blind and not judged.warm:
        # A probe too small to show reuse cannot show its absence either: it read DEAD while
        # the cache hit 65,536 of 72,536 tokens, and the rep was dropped.
        judged = Judgement(False, "inconclusive", "blind", f"{blind}; {judged.reason}")
    same: bool | None = None
    verdict, reason = judged.verdict, judged.reason
    if compare_answers and judged.warm:
        same, words = answers_words(cold, await send("repeat"))
        if same is False:
            # Only a cold answer that reproduces makes a warm one that differs the cache's
            # fault: on an H200 (random-weight Llama-8B shape, bf16) a 34k-token prompt's greedy
            # answers forked after 6 tokens whether or not the cache served them.
            same, words = control_words(cold, await send("control"), words)
        reason = f"{reason}; {words}"
        if same is False:
            verdict = "mismatch"
    return CacheCheck(
        group=group,
        rep=rep,
        prefix_key=prefix_key,
        probe_tokens=probe_tokens,
        block_size=block_size,
        block_size_source=block_size_source,
        cold_ttft_s=ttft_s(cold),
        warm_ttft_s=ttft_s(warm),
        hits_delta=hits_delta,
        warm=judged.warm,
        reason=reason,
        verdict=verdict,
        decided_by=judged.decided_by,
        floor_ttft_s=floor_s,
        answers_match=same,
    )
