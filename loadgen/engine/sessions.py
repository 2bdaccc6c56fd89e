"""Multi-turn sessions at run time: each turn resends the conversation so far, with the
assistant's answers exactly as the server returned them, plus the turn's new user message.

The plan fixes sizes, seeds, start offsets and think times; only the answers are unknown
until the server gives them, so turns are assembled here. Every message text is built before
the rep's clock starts (sizing must not eat into the schedule). A turn is intended at its
session's start (turn 0) or at the previous answer's end + its think time: a conversation is a
closed loop of one, so a slow answer delays the rest of its session, as it would a user.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from loadgen.client.loops import OnRecord, Send, record_end
from loadgen.clock import Clock
from loadgen.engine.materialize import as_planned
from loadgen.records import StreamRecord
from loadgen.request import StreamRequest
from loadgen.scenario.plan import PlannedSession
from loadgen.scenario.prompts import PromptBuilder

# The function a tool-calling turn offers: the server's answer calls it, with a query.
LOOKUP_TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a query up and return what was found.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
        },
    },
}
Call = tuple[str, str, str]  # a tool call: id, function name, arguments


@dataclass(frozen=True, slots=True)
class BuiltSession:
    plan: PlannedSession
    system: str
    users: tuple[str, ...]
    # Per turn, the text its tool sends back (None for a turn without a tool).
    results: tuple[str | None, ...]


async def build_sessions(
    sessions: Sequence[PlannedSession], builder: PromptBuilder
) -> list[BuiltSession]:
    """Every session's system prompt, user messages and tool results, sized on the target's
    tokenizer."""
    out = []
    for s in sessions:
        system = (await builder.build(s.system)).text
        users = tuple([(await builder.build(t.user)).text for t in s.turns])
        results = tuple([None if t.tool is None else (await builder.build(t.tool.result)).text
                         for t in s.turns])  # fmt: skip
        out.append(BuiltSession(s, system, users, results))
    return out


def conversation(
    api: str,
    system: str,
    users: Sequence[str],
    answers: Sequence[str],
    tools: Sequence[tuple[Call, str] | None] = (),
) -> tuple[tuple[dict[str, Any], ...] | None, str]:
    """(chat messages, or None) and the completions prompt for a turn: the system prompt,
    then each earlier user message with its answer, then the new user message. A turn with a
    tool call (chat) has, between its user message and its answer, the assistant's call and
    the tool's result: `tools[i]` for turn i."""
    if api == "chat":
        # A shared dataset conversation has no system prompt (not even a salt tag).
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        for i, user in enumerate(users):
            messages.append({"role": "user", "content": user})
            if i < len(tools) and (exchange := tools[i]) is not None:
                messages += _tool_messages(*exchange)
            if i < len(answers):
                messages.append({"role": "assistant", "content": answers[i]})
        return tuple(messages), ""
    parts = [system]
    for i, user in enumerate(users):
        parts.append(user)
        if i < len(answers):
            parts.append(answers[i])
    return None, "".join(parts)


def _tool_messages(call: Call, result: str) -> list[dict[str, Any]]:
    call_id, name, arguments = call
    function = {"name": name, "arguments": arguments}
    return [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": call_id, "type": "function", "function": function}]},
        {"role": "tool", "tool_call_id": call_id, "content": result},
    ]  # fmt: skip


class Conversation:
    """One session's turns on any clock: the first turn's request, then after each answer the
    next one's, intended at that answer's end + its think time. A turn with a tool: its first
    request offers the tool; once the answer calls it, the tool's result goes back after the
    tool's latency, and that request's answer ends the turn."""

    def __init__(self, session: BuiltSession, model: str, rep_start_ns: int) -> None:
        self.session, self.model = session, model
        self.start_ns = rep_start_ns + session.plan.offset_ns
        self.answers: list[str] = []
        self.tools: list[tuple[Call, str] | None] = []

    def first(self) -> StreamRequest:
        turn = self.session.plan.turns[0]
        return self._request(0, self.start_ns + turn.think_ns)

    def after(self, rec: StreamRecord, end_ns: int) -> StreamRequest | None:
        """The next request after `rec`, the last one's record, which ended at `end_ns`; None
        when the session is over (its last turn, or a failed one: the conversation cannot go
        on without its answer)."""
        if rec.status != "ok" or rec.turn is None:
            return None
        tool = self.session.plan.turns[rec.turn].tool
        result = self.session.results[rec.turn]
        if tool is not None and result is not None and not rec.tool_result and rec.calls:
            self.tools.append((rec.calls[0], result))
            return self._request(rec.turn, end_ns + tool.latency_ns, tool_result=True)
        if len(self.tools) <= rec.turn:
            self.tools.append(None)  # answered without calling the tool it was offered
        self.answers.append(rec.answer or "")
        nxt = rec.turn + 1
        turns = self.session.plan.turns
        if nxt >= len(turns):
            return None
        return self._request(nxt, end_ns + turns[nxt].think_ns)

    def _request(self, turn: int, intended: int, *, tool_result: bool = False) -> StreamRequest:
        return turn_request(self.session, turn, self.answers, self.model, intended, self.tools,
                            tool_result=tool_result)  # fmt: skip


async def converse(
    conv: Conversation, send: Send[StreamRequest], on_record: OnRecord, clock: Clock
) -> None:
    """One session's turns, each sent at its intended instant, until the conversation ends."""
    req: StreamRequest | None = conv.first()
    while req is not None:
        await clock.sleep_until(req.t_intended_ns)
        rec = await send(req, req.t_intended_ns)
        on_record(dataclasses.replace(rec, answer=None))
        req = conv.after(rec, record_end(rec, clock))


def turn_request(
    s: BuiltSession,
    turn: int,
    answers: Sequence[str],
    model: str,
    intended: int,
    tools: Sequence[tuple[Call, str] | None] = (),
    *,
    tool_result: bool = False,
) -> StreamRequest:
    """Turn `turn` of the session (the conversation so far with `answers`, and `tools`'
    calls and results), intended at `intended` on the run clock: the request that offers the
    turn's tool, or with `tool_result` the one that sends the tool's result back."""
    p = s.plan
    t = p.request
    max_tokens = p.turns[turn].max_tokens
    messages, prompt = conversation(t.api, s.system, s.users[: turn + 1], answers, tools)
    offers = p.turns[turn].tool is not None and not tool_result
    return as_planned(
        t,
        model=model,
        t_intended_ns=intended,
        id=f"{p.id}/t{turn}" + ("r" if tool_result else ""),
        prompt=prompt,
        max_tokens=max_tokens,
        cache_salt=p.system.salt or None,
        messages=messages,
        session=p.id,
        turn=turn,
        keep_text=True,
        # Only turn 0 is all new (a salted system prompt); every later turn, and a tool's
        # result, resends the conversation so far, which the prefix cache is meant to carry.
        cold=turn == 0 and not tool_result,
        tool_result=tool_result,
        extra_body=(t.sampling or {})
        | ({"tools": [LOOKUP_TOOL], "tool_choice": "required"} if offers else {}),
    )
