"""Multi-turn sessions, turn by turn: how TTFT, prefix hits and decode move as the context
grows. Token counts are the server's (`usage`: prompt_tokens, and cached_tokens where the
server reports usage.prompt_tokens_details); `new_tokens` = prompt - cached, the part the
server had to prefill. TTFT and decode rate are the streams' own (summary `streams` rows).
A turn with a tool call is two requests: the one offered the tool (its row: the turn's TTFT,
context and hits) and the one that sent the tool's result back; the time in the tool (from
the call's end to the result's send) and the result request's TTFT are given apart."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from loadgen.analysis.stats import median
from loadgen.codec import from_json
from loadgen.records import StreamRecord


@dataclass(frozen=True, slots=True)
class TurnRow:
    """One turn index of a session group: medians over the group's sessions that reached it."""

    turn: int
    sessions: int
    ok: int
    prompt_tokens: float | None
    cached_tokens: float | None
    new_tokens: float | None
    hit_share: float | None
    ttft_s: float | None
    decode_tok_s: float | None
    tool_calls: int
    tool_s: float | None
    result_ttft_s: float | None


def session_turns(
    records: list[StreamRecord], rows: dict[str, dict[str, Any]]
) -> dict[str, list[TurnRow]]:
    """Per session group, one row per turn index (medians over the group's sessions)."""
    by_turn: dict[tuple[str, int], list[StreamRecord]] = defaultdict(list)
    results: dict[tuple[str | None, int | None], StreamRecord] = {}
    for r in records:
        if r.turn is not None and r.tool_result:
            results[(r.session, r.turn)] = r
        elif r.turn is not None:
            by_turn[(r.group, r.turn)].append(r)
    out: dict[str, list[TurnRow]] = defaultdict(list)
    for (group, turn), recs in sorted(by_turn.items()):
        ok = [r for r in recs if r.status == "ok"]
        back = [results[k] for r in ok if (k := (r.session, r.turn)) in results]
        out[group].append(
            TurnRow(
                turn=turn,
                sessions=len(recs),
                ok=len(ok),
                prompt_tokens=median(r.prompt_tokens for r in ok),
                cached_tokens=median(r.cached_tokens for r in ok),
                new_tokens=median(_new_tokens(r) for r in ok),
                hit_share=median(_hit_share(r) for r in ok),
                ttft_s=median(rows[r.id]["ttft_s"] for r in ok if r.id in rows),
                decode_tok_s=median(rows[r.id]["decode_tok_s"] for r in ok if r.id in rows),
                tool_calls=sum(r.tool_calls for r in ok),
                tool_s=median(_tool_s(r, results.get((r.session, r.turn))) for r in ok),
                result_ttft_s=median(rows[b.id]["ttft_s"] for b in back if b.id in rows),
            )
        )
    return dict(out)


def read_sessions(summary: Mapping[str, Any]) -> dict[str, list[TurnRow]]:
    """A run summary's session turns by group ({} where no stream was a session turn)."""
    return from_json(dict[str, list[TurnRow]], summary.get("sessions") or {})


def _tool_s(call: StreamRecord, result: StreamRecord | None) -> float | None:
    """Seconds from the call's end to the tool result's send: the tool's share of the turn."""
    if result is None or result.t_sent_ns is None or call.t_done_ns is None:
        return None
    return (result.t_sent_ns - call.t_done_ns) / 1e9


def _new_tokens(r: StreamRecord) -> int | None:
    if r.prompt_tokens is None or r.cached_tokens is None:
        return None
    return r.prompt_tokens - r.cached_tokens


def _hit_share(r: StreamRecord) -> float | None:
    if not r.prompt_tokens or r.cached_tokens is None:
        return None
    return r.cached_tokens / r.prompt_tokens
