"""The warning lines a report or a probe opens with, composed from what analysis judged: the
client limited the run (its own timing in the figures), streams meant to be cold came warm
from the prefix cache, outputs fell short of what ignore_eos owed, or prompts drifted from the
length asked."""

from __future__ import annotations

from collections.abc import Mapping

from loadgen.analysis.lengths import (
    DRIFT_SHARE,
    DRIFT_TOKENS,
    SHORT_SHARE,
    SHORT_TOKENS,
    PromptDrift,
    ShortOutput,
)
from loadgen.analysis.selferror import ADVICE, ClientLimits, Crowding
from loadgen.analysis.summary_types import RunSummary
from loadgen.analysis.warmth import WarmCache
from loadgen.run_manifest import CacheCheck


def client_reasons(c: ClientLimits) -> list[str]:
    """Each thing beside the limited streams' count that limited the client."""
    reasons = []
    if c.beyond_tolerance:
        reasons.append(
            f"{c.beyond_tolerance} of {c.measured} streams timed beyond tolerance kept their "
            "server verdict (not counted as client_limited)"
        )
    if c.loop_lag_max_ms is not None:
        lag, limit = c.loop_lag_max_ms, c.loop_lag_limit_ms
        reasons.append(f"event-loop lag max {lag:.1f} ms > {limit:g} ms")
    if c.crowding is not None:
        reasons.append(crowding_text(c.crowding))
    if c.server_waited:
        reasons.append(
            f"{c.server_waited} of {c.measured} streams had their server, on this host, wait "
            "for a core longer than their tolerance between their send and first token (the "
            "kernel's count): time it lost to this host's other processes, loadgen's among "
            "them, sits inside their TTFT"
        )
    if c.send_late_loadgen:
        reasons.append(
            f"{c.send_late_loadgen} of {c.measured} requests' send side was late beyond "
            "tolerance in loadgen's own write of the request"
        )
    return reasons


def crowding_text(c: Crowding) -> str:
    if c.busy_cores is not None and c.client_cores is not None:
        fewer = f"run fewer workers than {c.workers}, or " if c.workers > 1 else ""
        waited = (
            ""
            if c.server_wait is None
            else f", the server waiting for a core {c.server_wait:.0%} of that time by the "
            "kernel's count"
        )
        return (
            f"this host's {c.cores} cores were {c.busy_cores / c.cores:.0%} busy while streams "
            f"were timed ({c.client_cores:.1f} cores loadgen's own) beside the server at "
            f"{c.host}{waited}: its sends and the kernel's deliveries waited for a core, inside "
            f"TTFTs where no client stamp sees it ({fewer}the server elsewhere)"
        )
    return (
        f"{c.workers} client process{'es' if c.workers > 1 else ''} and the server at {c.host} "
        f"share this host's {c.cores} core{'s' if c.cores > 1 else ''}: the server's request "
        f"reads wait for a core, inside every TTFT (leave it one: --workers {max(1, c.cores - 1)})"
    )


def client_banner(c: ClientLimits) -> str | None:
    """The line a report or probe opens with when the client limited the run, else None."""
    reasons = client_reasons(c)
    if c.limited:
        return (
            f"!! CLIENT LIMITED: {c.limited} of {c.measured} streams timed with loadgen's own "
            f"error above tolerance; their TTFT and gaps include loadgen's delay. Fix: {ADVICE}."
            + "".join(f" Also: {r}." for r in reasons)
        )
    if reasons:
        return f"!! CLIENT LIMITED: {'; '.join(reasons)}. Fix: {ADVICE}."
    return None


def sweep_client_banner(arms: Mapping[str, ClientLimits]) -> str:
    """A sweep's banner: each client-limited arm's count and reasons, named by arm."""
    why = [
        f"{arm}: {r}"
        for arm, c in arms.items()
        for r in ([f"{c.limited} of {c.measured} streams client_limited"] if c.limited else [])
        + client_reasons(c)
    ]
    return f"!! CLIENT LIMITED: {'; '.join(why)}"


def run_banner(run: RunSummary) -> str | None:
    """The CLIENT LIMITED line a run's (or a sweep's) report opens with, else None."""
    if run.client_limits is not None:
        return client_banner(run.client_limits)
    return sweep_client_banner(run.arm_client_limits) if run.arm_client_limits else None


def warm_cache_line(w: WarmCache) -> str:
    """The warning when measured salted streams were served from cache."""
    return (
        f"!! WARM CACHE: {w.streams} of {w.measured} measured streams meant to be cold "
        f"(salted) were served from the prefix cache ({', '.join(w.sources)}): a replayed seed "
        "on a server that kept an earlier run's cache? their TTFTs are cache hits"
    )


# How a primed rep's cache check reads in the report, by its verdict: "!!" where its figures
# cannot be taken as cached ones.
_CACHE_CHECK_SAYS = {
    "healthy": "cache check: {where}: warm ({reason})",
    "dead": "!! CACHE DEAD: {where}: its primed prefix never hit the cache ({reason}): the rep "
    "was not measured; restart the server and run again (a dead boot stays dead)",
    "mismatch": "!! CACHE WRONG ANSWERS: {where}: {reason}: measured, but the cache restores "
    "wrong state",
    "inconclusive": "!! CACHE UNPROVEN: {where}: {reason}: measured, its cached figures unproven",
}


def cache_check_line(c: CacheCheck) -> str:
    """A primed rep's check that its prefix was warm before it was measured."""
    where = f"group {c.group} rep {c.rep}"
    return _CACHE_CHECK_SAYS[c.verdict].format(where=where, reason=c.reason)


def short_output_line(s: ShortOutput) -> str:
    """The warning when measured ignore_eos streams delivered fewer tokens than requested."""
    return (
        f"!! SHORT OUTPUT: {s.streams} of {s.judged} measured ignore_eos streams delivered "
        f"fewer tokens than max_tokens by more than {SHORT_SHARE:.0%} or {SHORT_TOKENS} tokens "
        f"(groups {', '.join(s.groups)}; worst {s.worst}: {s.delivered} of {s.requested}): the "
        "server stopped despite ignore_eos, so output throughput and TPOT cover shorter answers "
        "than asked"
    )


def prompt_drift_line(d: PromptDrift) -> str:
    """The warning when measured prompts drifted from the length asked."""
    sent = "?" if d.sent is None else d.sent
    counted = "?" if d.counted is None else d.counted
    return (
        f"!! PROMPT DRIFT: {d.streams} of {d.judged} measured streams sent or were counted "
        f"more than {DRIFT_TOKENS} tokens and {DRIFT_SHARE:.0%} off the prompt length asked "
        f"(groups {', '.join(d.groups)}; worst {d.worst}: asked {d.asked}, sent {sent}, "
        f"server counted {counted}): a chat template or another tokenizer; prefill figures "
        "are for the counted length"
    )
