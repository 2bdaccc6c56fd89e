"""Streams meant to be cold that the server answered from its prefix cache.

A salted prompt opens with a tag no earlier request can have sent, so none of its blocks can be
cached, unless the tag was reused: a replayed seed (`--seed`, `--replay`) against a server that
kept the earlier run's cache. Its TTFT then measures a cache hit, not a prefill, and every
verdict that compares it with a prefill time is wrong; so the stream's evidence says so.

Two witnesses, the first that speaks wins:
1. `usage`: the stream's own `usage.prompt_tokens_details.cached_tokens` (vLLM with
   `--enable-prompt-tokens-details`, the sim). Warm when more than WARM_SHARE of its prompt.
2. `prefix_hits_counter`: otherwise the server's `prefix_cache_hits_total` (tokens) rose by more
   than WARM_SHARE of its prompt between the polls around its wait for a first token. The
   counter is server-wide, so it is used only when every measured stream is meant to be cold:
   then any hit is a hit some salted stream should not have had.

"Meant to be cold" is the plan's intent carried on each record (`cold`): a salted prompt is,
a session's later turns (they resend the conversation) and hash_ids trace rows (they share
blocks on purpose) are not. Guessing it from the group's `cache: salted` flagged 28 of
agent_sessions' 32 turns as warm on a fresh engine; the group is used only for records
written before `cold` existed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from loadgen.analysis.baselines import prompt_size
from loadgen.analysis.timeline import Timeline
from loadgen.records import StreamRecord
from loadgen.run_manifest import RunManifest

# A salted prompt may share a block or two of chat-template header with others on a server
# without cache_salt; a tenth of the prompt is far beyond that and far below a warm rerun's ~1.
WARM_SHARE = 0.1
HITS = "prefix_cache_hits_total"


def salted_groups(manifest: RunManifest) -> frozenset[str]:
    """Names of the scenario's groups whose prompts are salted (run.json's resolved scenario)."""
    groups = (manifest.scenario or {}).get("groups") or []
    if isinstance(groups, dict):
        groups = [{"name": k} | v for k, v in groups.items() if isinstance(v, dict)]
    return frozenset(
        g["name"]
        for g in groups
        if isinstance(g, dict) and (g.get("prompt") or {}).get("cache") == "salted"
    )


def meant_cold(rec: StreamRecord, salted: frozenset[str]) -> bool:
    """The plan meant `rec` to be cold (module docstring); old records: its group is salted."""
    return rec.cold if rec.cold is not None else rec.group in salted


def cache_warmth(
    rec: StreamRecord, timeline: Timeline, salted: frozenset[str], *, counter_usable: bool
) -> dict[str, Any] | None:
    """Evidence that a salted measured stream was served from cache, or None."""
    if rec.phase != "measure" or not meant_cold(rec, salted) or rec.status != "ok":
        return None
    prompt = prompt_size(rec)
    if not prompt or rec.t_sent_ns is None or rec.t_first_ns is None:
        return None
    if rec.cached_tokens is not None:
        if rec.cached_tokens <= WARM_SHARE * prompt:
            return None
        return {
            "source": "usage",
            "cached_tokens": rec.cached_tokens,
            "prompt_tokens": prompt,
            "reason": (
                f"salted prompt, yet {rec.cached_tokens} of its {prompt} prompt tokens came "
                "from the prefix cache (usage cached_tokens): its TTFT is a cache hit"
            ),
        }
    found = timeline.outer_delta(HITS, rec.t_sent_ns, rec.t_first_ns) if counter_usable else None
    if found is None or found[0] <= WARM_SHARE * prompt:
        return None
    hits = found[0]
    return {
        "source": "prefix_hits_counter",
        "hits_delta": hits,
        "prompt_tokens": prompt,
        "reason": (
            f"salted prompt, yet the server's prefix-hit counter rose by {hits:g} tokens while "
            "it waited for its first token (every stream is salted): a cache hit, not a prefill"
        ),
    }


@dataclass(frozen=True, slots=True)
class WarmCache:
    """Measured streams meant to be cold that the server served from its prefix cache, of all
    measured streams, and the witnesses that said so."""

    streams: int
    measured: int
    sources: tuple[str, ...]


def warm_cache(evidence: Sequence[Mapping[str, Any]]) -> WarmCache | None:
    """The measured streams (their evidence, one each) served warm, or None where none was."""
    warm = [e["cache_warm"] for e in evidence if "cache_warm" in e]
    if not warm:
        return None
    return WarmCache(len(warm), len(evidence), tuple(sorted({w["source"] for w in warm})))
