"""Session turns that call a tool (issue 24): the request offers one function, the sim's answer
calls it (`delta.tool_calls` on the wire), the tool's latency is waited, its result goes back
as the turn's second request; per-turn TTFT and the time in the tool are reported apart, on
the virtual clock (exactly) and over HTTP."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from loadgen.analysis.sessions import read_sessions
from loadgen.client.decode import StreamDecoder
from loadgen.codec import to_json
from loadgen.engine.run import RunOptions, run_plan
from loadgen.engine.sessions import LOOKUP_TOOL, BuiltSession, Conversation
from loadgen.records import StreamRecord, read_streams
from loadgen.report.cmd import write_report
from loadgen.request import StreamRequest
from loadgen.scenario.load import ScenarioError, load_scenario
from loadgen.scenario.plan import plan

from support.virtual import run_virtual

SMALL = ["groups.agents.count=2", "groups.agents.session.turns=2"]
LATENCY_NS = 800_000_000


def by_id(records: list[StreamRecord]) -> dict[str, StreamRecord]:
    return {r.id: r for r in records}


def check_turns(recs: dict[str, StreamRecord]) -> None:
    """Every turn of both sessions is a call, then the tool's result sent back."""
    calls = sorted(i for i in recs if not i.endswith("r"))
    assert len(calls) == 4 and sorted(recs) == sorted([*calls, *(c + "r" for c in calls)])
    for cid in calls:
        call, back = recs[cid], recs[cid + "r"]
        assert (call.status, back.status) == ("ok", "ok")
        assert (call.tool_calls, call.finish_reason, call.tool_result) == (1, "tool_calls", False)
        assert (back.tool_calls, back.tool_result, back.turn) == (0, True, call.turn)
        # The result request resends the call's prompt, the call and a 3000-token result.
        assert back.prompt_tokens is not None and call.prompt_tokens is not None
        assert back.prompt_tokens >= call.prompt_tokens + call.completion_tokens + 3000
        assert back.cached_tokens is not None and back.cached_tokens >= call.prompt_tokens - 16


async def test_a_tool_turn_on_the_virtual_clock_waits_exactly_the_tools_latency(
    tmp_path: Path,
) -> None:
    run = await run_virtual("agent_tools", SMALL, tmp_path)
    check_turns(run.records)
    for rid, rec in run.records.items():
        if rec.tool_result:
            call = run.records[rid[:-1]]
            assert rec.t_sent_ns - call.t_done_ns == LATENCY_NS
    rows = run.summary["sessions"]["agents"]
    assert [(r["turn"], r["sessions"], r["tool_calls"], r["tool_s"]) for r in rows] == [
        (0, 2, 2, 0.8), (1, 2, 2, 0.8)
    ]  # fmt: skip
    assert all(r["result_ttft_s"] > 0 for r in rows)
    turns = read_sessions(run.summary)["agents"]
    assert [to_json(t) for t in turns] == rows and turns[1].tool_s == 0.8
    assert run.summary["run"]["records"]["planned"] == 8  # two requests a turn
    write_report(run.run_dir)
    text = (run.run_dir / "report.txt").read_text()
    assert "in tool s" in text and "result TTFT s" in text


async def test_a_tool_turn_over_http_parses_the_servers_tool_calls(tmp_path: Path) -> None:
    scenario = load_scenario("agent_tools", [*SMALL, "sim.profile=tiny"])
    root = await run_plan(plan(scenario), RunOptions(out_root=tmp_path, progress=False),
                          warn=lambda m: None)  # fmt: skip
    recs = by_id(read_streams(root))
    check_turns(recs)
    for rid, rec in recs.items():
        if rec.tool_result:
            waited = rec.t_sent_ns - recs[rid[:-1]].t_done_ns
            # Wall time: at least the latency; the slack is a loaded machine's scheduling.
            assert LATENCY_NS <= waited < LATENCY_NS + 500_000_000


def test_sessions_without_tools_offer_no_tool() -> None:
    s = load_scenario("agent_sessions", ["groups.agents.count=1"])
    session = plan(s).arms[0].reps[0].sessions[0]
    assert all(t.tool is None for t in session.turns)
    n = len(session.turns)
    conv = Conversation(BuiltSession(session, "S", ("u",) * n, (None,) * n), "m", 0)
    assert "tools" not in conv.first().extra_body


def test_the_result_request_carries_the_call_and_the_tools_answer() -> None:
    s = load_scenario("agent_tools", SMALL)
    session = plan(s).arms[0].reps[0].sessions[0]
    built = BuiltSession(session, "SYS", ("U0", "U1"), ("R0", "R1"))
    conv = Conversation(built, "m", 0)
    first = conv.first()
    assert first.extra_body["tools"] == [LOOKUP_TOOL]
    assert first.extra_body["tool_choice"] == "required"
    call = record(first, calls=(("call-1", "lookup", '{"query": "x"}'),))
    back = conv.after(call, 5)
    assert back is not None and back.tool_result and back.id == first.id + "r"
    assert back.t_intended_ns == 5 + LATENCY_NS and "tools" not in back.extra_body
    assert back.messages is not None and back.messages[-2:] == (
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call-1",
         "type": "function", "function": {"name": "lookup", "arguments": '{"query": "x"}'}}]},
        {"role": "tool", "tool_call_id": "call-1", "content": "R0"},
    )  # fmt: skip
    nxt = conv.after(record(back, answer="A0"), 10)
    assert nxt is not None and nxt.turn == 1 and not nxt.tool_result
    assert nxt.messages is not None
    assert [m["role"] for m in nxt.messages] == [
        "system", "user", "assistant", "tool", "assistant", "user"
    ]  # fmt: skip
    assert nxt.messages[4]["content"] == "A0"


def record(req: StreamRequest, *, calls=None, answer: str = "") -> StreamRecord:
    """An ok record of `req` that returned `calls` or `answer`."""
    dec = StreamDecoder(chat=True, keep_text=True)
    rec = dec.to_record(req, run_start_ns=0, http_status=200, t_sent=0, t_headers=0, t_end=1,
                        error=None)  # fmt: skip
    return dataclasses.replace(rec, status="ok", error=None, calls=calls, answer=answer)


def test_the_decoder_joins_tool_call_deltas_into_calls() -> None:
    events = [
        b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n',
        b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1",'
        b'"type":"function","function":{"name":"lookup","arguments":"{\\"query\\": \\"a"}}]}}]}'
        b"\n\n",
        b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":'
        b'{"arguments":"b\\"}"}}]},"finish_reason":"tool_calls"}]}\n\n',
        b"data: [DONE]\n\n",
    ]
    dec = StreamDecoder(chat=True, keep_text=True)
    for i, e in enumerate(events):
        dec.feed(e, 1000 + i)
    req = StreamRequest(id="t", model="m", prompt="", max_tokens=8, api="chat")
    rec = dec.to_record(req, run_start_ns=0, http_status=200, t_sent=900, t_headers=950,
                        t_end=2000, error=None)  # fmt: skip
    assert rec.calls == (("c1", "lookup", '{"query": "ab"}'),)
    assert (rec.tool_calls, rec.chunks, rec.finish_reason, rec.answer) == (
        1, 2, "tool_calls", ""
    )  # fmt: skip
    assert rec.t_first_ns == 1001  # the first tool-call delta is the first token
    assert "calls" not in to_json(rec) and to_json(rec)["tool_calls"] == 1


def test_tools_need_the_chat_api_and_both_fields(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match=r"session.tools: only applies to api: chat"):
        load_scenario("agent_tools", ["api=completions"])
    with pytest.raises(ScenarioError, match=r"session.tools.result_tokens: missing"):
        load_scenario("agent_tools", ["groups.agents.session.tools={latency_s: 1}"])


def test_a_scenarios_sampling_rides_every_turn_and_the_tools_result() -> None:
    s = load_scenario("agent_tools", [*SMALL, "sampling.temperature=0.5"])
    session = plan(s).arms[0].reps[0].sessions[0]
    conv = Conversation(BuiltSession(session, "SYS", ("U0", "U1"), ("R0", "R1")), "m", 0)
    first = conv.first()
    assert first.extra_body["temperature"] == 0.5 and first.extra_body["tools"] == [LOOKUP_TOOL]
    back = conv.after(record(first, calls=(("call-1", "lookup", "{}"),)), 5)
    assert back is not None and back.extra_body == {"temperature": 0.5}
    plain = load_scenario("agent_tools", SMALL)
    session = plan(plain).arms[0].reps[0].sessions[0]
    conv = Conversation(BuiltSession(session, "SYS", ("U0", "U1"), ("R0", "R1")), "m", 0)
    assert "temperature" not in conv.first().extra_body
