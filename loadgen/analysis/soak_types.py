"""soak.json as types: what the soak report reads of a soak's analysis (analysis/soak.py, with
how it ended from run.json), read once from its JSON, as summary_types.py does for a run.

Every time and rate is on the server's clock (soak.py says why).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from loadgen.analysis.drift import Verdict
from loadgen.analysis.summary_types import ServerWindow, Target
from loadgen.clock import ClockName
from loadgen.codec import from_json


@dataclass(frozen=True, slots=True)
class WindowServer:
    """The server's /metrics over one window: the run's server window of it, with the prompt
    tokens and the polls' mean kv usage soak.py adds (None where the server exports none)."""

    window: ServerWindow
    kv_mean_perc: float | None
    prompt_tokens: float | None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> WindowServer:
        return cls(ServerWindow.from_json(d), d.get("kv_mean_perc"), d.get("prompt_tokens"))


@dataclass(frozen=True, slots=True)
class WindowClient:
    """loadgen's self-watch over one window; `behind` where it fell behind its schedule."""

    available: bool
    behind: bool
    lag_max_ms: float = 0.0
    cpu_share: float = 0.0
    rss_mib_mean: float = 0.0

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> WindowClient:
        if not d["available"]:
            return cls(False, d["behind"])
        return cls(True, d["behind"], d["lag_max_ms"], d["cpu_share"], d["rss_mib_mean"])


@dataclass(frozen=True, slots=True)
class WindowGpu:
    available: bool
    sm_clock_mhz_mean: float | None = None
    power_w_mean: float | None = None
    throttle_reasons: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> WindowGpu:
        if not d["available"]:
            return cls(False)
        return cls(True, d["sm_clock_mhz_mean"], d["power_w_mean"], tuple(d["throttle_reasons"]))


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
    # Mean decode rate by context bin: (bin label, requests, tok/s); bins with none left out.
    context_bins: Mapping[str, tuple[int, float]]

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SoakWindow:
        return cls(
            d["label"], d["n"], d["from_s"], d["to_s"], d["duration_s"],
            d["decode_tok_s_median"], d["decode_tok_s_p10"], d["ttft_s_median"],
            d["prefill_tok_s_median"], d["context_mean"], d["prompt_tokens_mean"],
            d["completion_tokens_mean"], WindowServer.from_json(d["server"]),
            WindowClient.from_json(d["client"]), WindowGpu.from_json(d["gpu"]),
            {b["bin"]: (b["n"], b["decode_tok_s_mean"]) for b in d["context_bins"]},
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class ClientMemory:
    """loadgen's RSS, first window with self-watch samples to last (measured: two or more)."""

    measured: bool
    flat: bool = True
    first_mib: float = 0.0
    last_mib: float = 0.0
    change: float = 0.0

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ClientMemory:
        if not d["measured"]:
            return cls(False)
        return cls(True, d["flat"], d["first_mib"], d["last_mib"], d["change"])


@dataclass(frozen=True, slots=True)
class ClocksControl:
    """Whether the GPU clocks are ruled out as a cause of drift (measured: a GPU was sampled)."""

    measured: bool
    ruled_out: bool = False
    throttled_windows: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    sm_clock_first_mhz: float | None = None
    sm_clock_last_mhz: float | None = None
    sm_clock_change: float | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ClocksControl:
        if not d.get("measured"):
            return cls(False)
        return cls(True, d["ruled_out"], tuple(d["throttled_windows"]), tuple(d["reasons"]),
                   d["sm_clock_first_mhz"], d["sm_clock_last_mhz"],
                   d["sm_clock_change"])  # fmt: skip


# The ends of a soak that the server decided (engine/soak.py SoakStop): it was cut short.
SERVER_STOPS = ("server unreachable", "server failing")


@dataclass(frozen=True, slots=True)
class SoakEnd:
    """How the soak stopped sending (run.json's soak_end; interrupted where it never said)."""

    reason: str | None
    at_s: float | None
    detail: str | None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SoakEnd:
        return cls(d.get("reason"), d.get("at_s"), d.get("detail"))


@dataclass(frozen=True, slots=True)
class SoakPointRow:
    """One request on the rate-over-time plot."""

    t_s: float
    rate: float
    context: float


@dataclass(frozen=True, slots=True)
class Soak:
    scenario: str | None
    target: Target
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
    clocks: ClocksControl
    verdict: Verdict
    end: SoakEnd
    points: tuple[SoakPointRow, ...]

    @classmethod
    def from_json(cls, s: Mapping[str, Any]) -> Soak:
        return cls(
            scenario=s.get("scenario"),
            target=Target.from_json(s.get("target")),
            speed=s.get("speed"),
            clock=ClockName.read(s.get("clock")),
            window=s["window"],
            requests=s["requests"],
            failed_streams=s["failed_streams"],
            windows=tuple(SoakWindow.from_json(w) for w in s["windows"]),
            first_to_last=s["first_to_last"],
            excluded_windows=tuple(s["excluded_windows"]),
            client_memory=ClientMemory.from_json(s["client_memory"]),
            client_watched=s["client_watched"],
            clocks=ClocksControl.from_json(s.get("clocks") or {}),
            verdict=from_json(Verdict, s["verdict"]),
            end=SoakEnd.from_json(s["end"]),
            points=tuple(SoakPointRow(p["t_s"], p["rate"], p["context"]) for p in s["points"]),
        )
