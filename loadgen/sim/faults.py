"""Faults the simulated server can inject, each switched on by one `--fault` option.

HTTP-level faults (error statuses, dropped or stalled streams) are drawn here from a seeded RNG,
the same number of draws per request whatever the outcome, so a run with the same seed and the
same request order fails the same requests. Engine-level faults (a cache that never hits, step
time drift, a waiting-queue limit, warm answers that differ from cold) are handed to the
engine through its config. `early_eos` shortens what a request under ignore_eos is generated
(a server that ends at EOS whatever ignore_eos asks; the sim has no EOS, so its finish_reason
stays "length").
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Literal

MidStreamFault = Literal["drop", "stall"]

_PROBABILITIES = ("http500", "http429", "drop", "stall")
_USAGE = (
    "faults: http500=P, http429=P, drop=P, stall=P, warm_mismatch=P, needle_miss=P "
    "(probabilities 0..1), early_eos=F (a fraction 0..1), "
    "stall_s=SECONDS, cache_dead, drift=PERCENT_PER_HOUR, max_waiting=N"
)


@dataclass(frozen=True, slots=True)
class FaultConfig:
    """Which faults are on. Probabilities are per request; `stall_s` is how long a stall lasts."""

    http500: float = 0.0
    http429: float = 0.0
    drop: float = 0.0
    stall: float = 0.0
    stall_s: float = 2.0
    cache_dead: bool = False
    drift: float = 0.0
    max_waiting: int | None = None
    # An engine-level fault: a cache-hit request answers other text than cold (see engine).
    warm_mismatch: float = 0.0
    # A needle question (loadgen/sim/needle.py) answered with other text than the planted code.
    needle_miss: float = 0.0
    # Under ignore_eos, answers end at this fraction of max_tokens (0: off, the full answer).
    early_eos: float = 0.0

    @property
    def any_http(self) -> bool:
        return any(getattr(self, name) > 0 for name in _PROBABILITIES)

    def generated_tokens(self, max_tokens: int, ignore_eos: bool) -> int:
        """The tokens a request is generated: max_tokens, or under `early_eos` and ignore_eos
        that share of it (at least one)."""
        if not (self.early_eos and ignore_eos):
            return max_tokens
        return max(1, int(max_tokens * self.early_eos))


def parse_fault_options(options: Iterable[str]) -> FaultConfig:
    """Builds a FaultConfig from `--fault` values like `http500=0.1`, `cache_dead`, `drift=5`.

    Raises ValueError with a one-line message naming the bad option and the accepted forms.
    """
    values: dict[str, object] = {}
    known = {f.name for f in fields(FaultConfig)}
    for option in options:
        name, sep, raw = option.partition("=")
        name = name.strip()
        if name not in known:
            raise ValueError(f"unknown fault {option!r}; {_USAGE}")
        if name == "cache_dead":
            if sep and raw.strip().lower() not in ("1", "true", "yes", "on"):
                raise ValueError(f"fault {option!r}: cache_dead takes no value; {_USAGE}")
            values[name] = True
            continue
        if not sep:
            raise ValueError(f"fault {option!r} needs a value, like {name}=...; {_USAGE}")
        values[name] = _parse_value(name, raw.strip(), option)
    return FaultConfig(**values)  # type: ignore[arg-type]


def _parse_value(name: str, raw: str, option: str) -> float | int:
    try:
        value: float | int = int(raw) if name == "max_waiting" else float(raw)
    except ValueError:
        raise ValueError(f"fault {option!r}: {raw!r} is not a number; {_USAGE}") from None
    if name in (*_PROBABILITIES, "warm_mismatch", "needle_miss") and not 0.0 <= value <= 1.0:
        raise ValueError(f"fault {option!r}: a probability must lie in 0..1")
    if name == "early_eos" and not 0.0 <= value <= 1.0:
        raise ValueError(f"fault {option!r}: a fraction of max_tokens must lie in 0..1")
    if name in ("stall_s", "max_waiting") and value < 0:
        raise ValueError(f"fault {option!r}: must not be negative")
    return value


@dataclass(frozen=True, slots=True)
class RequestFaults:
    """What goes wrong for one request: an HTTP status instead of a stream, or a mid-stream
    fault applied after the first content chunk (so the client has seen the stream start)."""

    http_status: int | None = None
    mid_stream: MidStreamFault | None = None


class FaultInjector:
    """Draws each request's faults: from the seed and the client's request id where the request
    names one (X-Request-Id), so a stream meets the same fault on either clock and whatever
    came before it; else from one seeded RNG, in the order requests arrive."""

    def __init__(self, config: FaultConfig, seed: int = 0) -> None:
        self.config = config
        self._seed = seed
        self._rng = random.Random(seed)

    def draw(self, key: str | None = None) -> RequestFaults:
        if not self.config.any_http:
            return RequestFaults()
        # In arrival order, the launched sim's boot check took the first draw over HTTP and
        # not on the virtual clock: one seed failed streams 9, 10, 12 on one, 10, 11, 13 on
        # the other.
        rng = self._rng if key is None else random.Random(f"{self._seed}:{key}")
        # Four draws every time, so one fault's outcome never shifts another's sequence.
        u500, u429, udrop, ustall = (rng.random() for _ in range(4))
        cfg = self.config
        if u500 < cfg.http500:
            return RequestFaults(http_status=500)
        if u429 < cfg.http429:
            return RequestFaults(http_status=429)
        if udrop < cfg.drop:
            return RequestFaults(mid_stream="drop")
        if ustall < cfg.stall:
            return RequestFaults(mid_stream="stall")
        return RequestFaults()
