"""soak.json as types: what the soak report reads of a soak's analysis (analysis/soak.py, with
how it ended from run.json), read once from its JSON, as summary_types.py does for a run.

Every time and rate is on the server's clock (soak.py says why).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from loadgen.analysis.drift import DriftVerdict
from loadgen.analysis.summary_types import RecordTally, RunTarget, ServerWindow, target_json
from loadgen.clock import ClockName
from loadgen.codec import from_json
from loadgen.run_manifest import UntilPrecise


@dataclass(frozen=True, slots=True)
class WindowServer(ServerWindow):
    """The server's /metrics over one window: the run's server window of it, with the prompt
    tokens and the polls' mean kv usage soak.py adds (None where the server exports none)."""

    kv_mean_perc: float | None = None
    prompt_tokens: float | None = None


@dataclass(frozen=True, slots=True)
class WindowClient:
    """loadgen's self-watch over one window; `behind` where it fell behind its schedule."""

    available: bool
    behind: bool
    lag_max_ms: float = 0.0
    cpu_share: float = 0.0
    rss_mib_mean: float = 0.0


@dataclass(frozen=True, slots=True)
class WindowGpu:
    available: bool
    sm_clock_mhz_mean: float | None = None
    power_w_mean: float | None = None
    throttle_reasons: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ContextBin:
    """A window's requests in one context bin, and their mean decode rate (tok/s)."""

    bin: str
    n: int
    decode_tok_s_mean: float


@dataclass(frozen=True, slots=True)
class WindowPrecision(UntilPrecise):
    """How `--until-precise` ended for one window of a soak, as for a run (`planned` None: a
    length bounds a window, not a count) and, where not every target came within its margin,
    what closed the window first: its own length (`window length`) or the soak's end."""

    cut_by: str | None = None


@dataclass(frozen=True, slots=True)
class SoakPrecise:
    """A soak's `--until-precise`: the targets (metric_pNN=margin) that close its windows and
    the longest a window may last (s of the server's clock; None: only the soak's end)."""

    targets: tuple[str, ...]
    limit_s: float | None


@dataclass(frozen=True, slots=True)
class SoakWindow:
    label: str
    n: int
    from_s: float
    to_s: float
    duration_s: float
    decode_tok_s_median: float | None
    decode_tok_s_p10: float | None
    ttft_s_median: float | None
    prefill_tok_s_median: float | None
    context_mean: float | None
    prompt_tokens_mean: float | None
    completion_tokens_mean: float | None
    server: WindowServer
    client: WindowClient
    gpu: WindowGpu
    context_bins: tuple[ContextBin, ...]  # bins with no request left out
    precision: WindowPrecision | None = None  # a soak without --until-precise has none

    def context_bin(self, label: str) -> ContextBin | None:
        return next((b for b in self.context_bins if b.bin == label), None)


@dataclass(frozen=True, slots=True)
class ClientMemory:
    """loadgen's RSS, first window with self-watch samples to last (measured: two or more)."""

    measured: bool
    flat: bool = True
    first_mib: float = 0.0
    last_mib: float = 0.0
    change: float = 0.0


@dataclass(frozen=True, slots=True)
class ClocksControl:
    """Whether the GPU clocks are ruled out as a cause of drift (measured: a GPU was sampled)."""

    measured: bool = False  # an older soak.json has no clocks block
    ruled_out: bool = False
    throttled_windows: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    sm_clock_first_mhz: float | None = None
    sm_clock_last_mhz: float | None = None
    sm_clock_change: float | None = None


# The ends of a soak that the server decided (engine/soak.py SoakStop): it was cut short.
SERVER_STOPS = ("server unreachable", "server failing")


@dataclass(frozen=True, slots=True)
class SoakEnd:
    """How the soak stopped sending (run.json's soak_end; interrupted where it never said)."""

    reason: str | None
    at_s: float | None
    detail: str | None


@dataclass(frozen=True, slots=True)
class SoakPointRow:
    """One request on the rate-over-time plot."""

    t_s: float
    rate: float
    context: float


@dataclass(frozen=True, slots=True)
class SoakSummary:
    scenario: str | None
    target: RunTarget
    speed: float | None
    clock: ClockName
    window: str
    requests: int
    failed_streams: int
    windows: tuple[SoakWindow, ...]
    first_to_last: float | None
    excluded_windows: tuple[str, ...]
    client_memory: ClientMemory
    client_watched: bool
    verdict: DriftVerdict
    end: SoakEnd
    points: tuple[SoakPointRow, ...]
    clocks: ClocksControl = ClocksControl()  # an older soak.json has none
    precise: SoakPrecise | None = None  # a soak without --until-precise has none
    records: RecordTally | None = None  # an older soak.json has none
    duration_s: float | None = None


def read_soak(s: Mapping[str, Any]) -> SoakSummary:
    """soak.json as its type, its target read as a run's is (target_json)."""
    return from_json(SoakSummary, {**s, "target": target_json(s.get("target"))})
