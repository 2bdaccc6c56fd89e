"""Schema of a group's `session` block (multi-turn conversations). Same conventions as
schema.py: every error noted with its file:line, None returned for a bad block."""

from __future__ import annotations

from loadgen.scenario.checks import Checker, choice, integer, join, number, show
from loadgen.scenario.limits import MAX_PROMPT_TOKENS, MAX_SECONDS, MAX_STREAMS
from loadgen.scenario.marked_yaml import MarkedMap
from loadgen.scenario.model import (
    MIN_PROMPT_TOKENS,
    OPEN_LOOP_START_KINDS,
    THINK_KINDS,
    Arrival,
    SessionConfig,
    ToolTurns,
)

SESSION_KEYS = (
    "turns", "system_tokens", "user_tokens", "max_context_tokens", "think_s", "think", "tools",
)  # fmt: skip
TOKENS = integer(MIN_PROMPT_TOKENS, MAX_PROMPT_TOKENS)


def session(
    c: Checker, group: MarkedMap, path: str, arrival: Arrival | None, api: str | None
) -> SessionConfig | None:
    """The group's session block, or None when the group has none (or it is wrong)."""
    if "session" not in group:
        return None
    m = c.mapping(group, "session", path)
    spath = join(path, "session")
    c.keys(m, spath, SESSION_KEYS)
    if arrival is not None and arrival.kind not in OPEN_LOOP_START_KINDS:
        why = f"got a session group under a {arrival.kind} arrival"
        c.at_key(group, "session", path, f"{why} (expected arrival together or staggered)")
    turns = c.field(m, "turns", spath, integer(1, MAX_STREAMS))
    system = c.field(m, "system_tokens", spath, TOKENS)
    user = c.field(m, "user_tokens", spath, TOKENS)
    cap = c.field(m, "max_context_tokens", spath, integer(MIN_PROMPT_TOKENS, nullable=True), None)
    think_s = c.field(m, "think_s", spath, number(ge=0, le=MAX_SECONDS), 0.0)
    think = c.field(m, "think", spath, choice(THINK_KINDS), "fixed")
    if None not in (cap, system, user) and cap < system + user:
        first = system + user
        message = f"got {show(cap)} (expected >= the first turn, system + user = {first})"
        c.at_value(m, "max_context_tokens", spath, message)
    tools = _tools(c, m, spath, api) if "tools" in m else None
    if None in (turns, system, user, think_s, think) or ("tools" in m and tools is None):
        return None
    return SessionConfig(turns, system, user, cap, think_s, think, tools)


def _tools(c: Checker, session: MarkedMap, spath: str, api: str | None) -> ToolTurns | None:
    """`tools: {latency_s, result_tokens}`: a tool call in every turn (chat only)."""
    if api != "chat":
        why = "only applies to api: chat (tool calls are chat messages)"
        c.at_key(session, "tools", spath, f"{why} (expected api: chat, or remove it)")
        return None
    m = c.mapping(session, "tools", spath)
    tpath = join(spath, "tools")
    c.keys(m, tpath, ("latency_s", "result_tokens"))
    latency = c.field(m, "latency_s", tpath, number(ge=0, le=MAX_SECONDS))
    result = c.field(m, "result_tokens", tpath, TOKENS)
    if latency is None or result is None:
        return None
    return ToolTurns(float(latency), result)
