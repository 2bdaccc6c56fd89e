"""A stream's verdict evidence as types: one per verdict, read from a summary stream row.

verdicts.py writes each verdict's evidence as JSON (summary.json's `evidence`); which parts it
holds depends on the verdict and on what decided it. `read_evidence` is the one place that knows
that layout, so a report asks a typed question (which phases held it, which prefills it blames,
how its decode crawled) instead of guessing a verdict from the keys present.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

WAIT_VERDICTS = frozenset({"admission_cap", "prefill_hol", "pool_pressure"})


@dataclass(frozen=True, slots=True)
class WaitPhase:
    """A piece of the excess wait in one state (verdicts.py rule 2), run-clock seconds."""

    state: str  # pool_pressure | admission_cap | prefill_hol | unexplained
    from_s: float
    to_s: float


@dataclass(frozen=True, slots=True)
class Wait:
    """The excess wait's decomposition: how long each state held the stream, piece by piece."""

    excess_s: float
    held_s: Mapping[str, float]
    phases: tuple[WaitPhase, ...]
    prefilling: tuple[str, ...]  # streams ahead of it prefilling in its wait (a verdict's)


@dataclass(frozen=True, slots=True)
class Crawl:
    """Decode while other streams prefilled against the stream's own steady rate after."""

    during_tok_s: float
    steady_tok_s: float
    fraction: float
    rationed: bool
    prefilling: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class WaitEvidence:
    """admission_cap, prefill_hol, or pool_pressure by its wait: the state that held longest."""

    verdict: str
    reason: str
    wait: Wait


@dataclass(frozen=True, slots=True)
class StallEvidence:
    """pool_pressure by a preemption stall: a decode gap across polls where preemptions rose."""

    reason: str
    gap_s: float
    cost_s: float
    preemptions: float
    wait: Wait | None  # a shorter wait it also had


@dataclass(frozen=True, slots=True)
class RationEvidence:
    """rationed_decode: its decode crawled while others prefilled."""

    reason: str
    crawl: Crawl


@dataclass(frozen=True, slots=True)
class AdmittedEvidence:
    """admitted: first token within its normal prefill, or a wait nothing could be blamed for."""

    reason: str
    wait: Wait | None
    crawl: Crawl | None  # its decode, judged and not rationed


@dataclass(frozen=True, slots=True)
class LateEvidence:
    """client_limited: loadgen sent it late, and the lateness was the bigger delay."""

    reason: str
    late_s: float
    wait: Wait | None


@dataclass(frozen=True, slots=True)
class ClientErrorEvidence:
    """client_limited: loadgen's own timing error exceeded its tolerance; `server` is what the
    server verdict it overrode had found."""

    reason: str
    error_bound_s: float
    tolerance_s: float
    server_verdict: str
    server: Evidence


@dataclass(frozen=True, slots=True)
class ErrorEvidence:
    """error: the stream failed (or was never sent)."""

    reason: str
    cls: str
    message: str
    http: int | None


Evidence = (
    WaitEvidence
    | StallEvidence
    | RationEvidence
    | AdmittedEvidence
    | LateEvidence
    | ClientErrorEvidence
    | ErrorEvidence
)


def held_phases(ev: Evidence) -> tuple[WaitPhase, ...]:
    """The pieces of the stream's excess wait, wherever its verdict keeps them."""
    if isinstance(ev, ClientErrorEvidence):
        return held_phases(ev.server)
    if isinstance(ev, WaitEvidence | StallEvidence | AdmittedEvidence | LateEvidence):
        return () if ev.wait is None else ev.wait.phases
    return ()


def blamed_prefills(ev: Evidence) -> tuple[str, ...]:
    """The streams whose prefill the verdict itself blames (a prefill it waited behind, or
    crawled beside); none where it blames something else."""
    if isinstance(ev, ClientErrorEvidence):
        return blamed_prefills(ev.server)
    if isinstance(ev, WaitEvidence):
        return ev.wait.prefilling
    if isinstance(ev, RationEvidence):
        return ev.crawl.prefilling
    return ()


def read_evidence(verdict: str, ev: Mapping[str, Any]) -> Evidence:
    """The typed evidence of a stream row's `verdict` and `evidence` (verdicts.py's layout)."""
    reason = str(ev.get("reason", ""))
    if verdict == "error":
        return ErrorEvidence(reason, ev.get("class", ""), ev.get("message", ""), ev.get("http"))
    if verdict == "client_limited":
        if "server_verdict" in ev:
            # The client's error bound overrode a server verdict, whose evidence is merged in
            # (itself client_limited when the stream was also sent late).
            rest = {k: v for k, v in ev.items() if k != "server_verdict"}
            server = read_evidence(ev["server_verdict"], rest)
            return ClientErrorEvidence(reason, ev["error_bound_s"], ev["tolerance_s"],
                                       ev["server_verdict"], server)  # fmt: skip
        return LateEvidence(reason, ev["late_s"], _wait(ev.get("wait")))
    if verdict == "pool_pressure" and "stall" in ev:
        return StallEvidence(reason, ev["stall"]["gap_s"], ev["cost_s"], ev["preemptions"],
                             _wait(ev.get("wait")))  # fmt: skip
    if verdict in WAIT_VERDICTS:
        wait = _wait(ev)
        assert wait is not None  # a wait verdict is decided by its held times
        return WaitEvidence(verdict, reason, wait)
    if verdict == "rationed_decode":
        crawl = _crawl(ev)
        assert crawl is not None  # judged stretches decide it
        return RationEvidence(reason, crawl)
    return AdmittedEvidence(reason, _wait(ev.get("wait")), _crawl(ev.get("decode")))


def _wait(ev: Mapping[str, Any] | None) -> Wait | None:
    if not ev or "held_s" not in ev:
        return None
    phases = tuple(WaitPhase(p["state"], p["from_s"], p["to_s"]) for p in ev.get("phases") or [])
    return Wait(ev["excess_s"], dict(ev["held_s"]), phases, tuple(ev.get("prefilling") or ()))


def _crawl(ev: Mapping[str, Any] | None) -> Crawl | None:
    if not ev or "fraction" not in ev:
        return None
    return Crawl(ev["during"]["tok_s"], ev["steady"]["tok_s"], ev["fraction"],
                 bool(ev["rationed"]), tuple(ev.get("prefilling") or ()))  # fmt: skip
