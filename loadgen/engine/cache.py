"""Priming a shared prefix and proving the cache is warm before anything is measured.

The seeds' lesson: a boot can serve correctly and never hit its prefix cache, and a probe that
spans one block or less reuses nothing even on a healthy boot ((blocks - 1) x B is what can
match). So the probe spans at least MIN_PROBE_BLOCKS blocks of the size the server chose, and
"warm" needs both signals: TTFT under half of cold and a prefix-hit counter that moved.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

from loadgen.analysis.rates import ttft_s
from loadgen.records import StreamRecord

MIN_PROBE_BLOCKS = 10
WARM_TTFT_RATIO = 0.5


@dataclass(frozen=True, slots=True)
class CacheCheck:
    group: str
    rep: int
    prefix_key: str
    probe_tokens: int
    block_size: int | None
    block_size_source: str | None
    cold_ttft_s: float | None
    warm_ttft_s: float | None
    hits_delta: float | None
    warm: bool
    reason: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


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


def warm_verdict(
    cold: StreamRecord, warm: StreamRecord, hits_delta: float | None
) -> tuple[bool, str]:
    """Warm iff warm TTFT < WARM_TTFT_RATIO x cold TTFT and (where the server counts hits)
    the hit counter grew. Returns (warm, the reason in words)."""
    cold_t, warm_t = ttft_s(cold), ttft_s(warm)
    if cold.status != "ok" or warm.status != "ok" or cold_t is None or warm_t is None:
        return False, "a priming stream failed"
    fast = warm_t < WARM_TTFT_RATIO * cold_t
    ratio = f"warm TTFT {warm_t:.3f}s vs cold {cold_t:.3f}s"
    if hits_delta is None:
        return fast, f"{ratio}; server reports no prefix-hit counter (TTFT alone)"
    if hits_delta <= 0:
        return False, f"{ratio}; prefix-cache hits did not grow (cache-dead boot?)"
    return fast, f"{ratio}; prefix-cache hits +{hits_delta:.0f} tokens"


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
) -> CacheCheck:
    """Sends the prefix cold ("prime"), then again ("probe"), and judges the pair.

    `send(phase)` streams the prefix with a short distinct tail and returns its record;
    `read_hits()` returns the server's prefix_cache_hits_total (None if not exported).
    """
    blind = probe_blind_reason(probe_tokens, block_size)
    cold = await send("prime")
    before = await read_hits()
    warm = await send("probe")
    after = await read_hits()
    hits_delta = None if before is None or after is None else after - before
    if blind:
        is_warm, reason = False, blind
    else:
        is_warm, reason = warm_verdict(cold, warm, hits_delta)
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
        warm=is_warm,
        reason=reason,
    )
