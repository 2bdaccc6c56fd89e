"""Typed verdict evidence (analysis/evidence.py): each verdict's evidence, as verdicts.py writes
it into summary.json, read back as its own type; the report's evidence cell and timeline read
the types, never the keys."""

from __future__ import annotations

import pytest

from loadgen.analysis.evidence import (
    AdmittedEvidence,
    ClientErrorEvidence,
    ErrorEvidence,
    LateEvidence,
    RationEvidence,
    StallEvidence,
    WaitEvidence,
    WaitPhase,
    blamed_prefills,
    held_phases,
    read_evidence,
)
from loadgen.analysis.summary_types import StreamRow
from loadgen.codec import from_json
from loadgen.report.plots import queued_until_s
from loadgen.report.text import waits_table

from support import verdict_cases as cases
from support.run_fixtures import failed, sample, stream, ticks


def typed(row):
    return read_evidence(row["verdict"], row["evidence"])


def test_a_wait_verdict_reads_as_its_wait_with_phases_and_the_prefills_it_blames():
    out = cases.by_id(cases.summarize(cases.whale_and_minnows(), cap=4))
    m1, m3 = typed(out["m1"]), typed(out["m3"])
    assert isinstance(m1, WaitEvidence) and m1.verdict == "prefill_hol"
    assert held_phases(m1) == (WaitPhase("prefill_hol", 0.001, pytest.approx(57.0)),)
    assert m1.wait.held_s == {"prefill_hol": pytest.approx(56.999)}
    assert blamed_prefills(m1) == ("w",) and blamed_prefills(m3) == ("m1", "m2", "w")
    assert isinstance(typed(out["w"]), AdmittedEvidence)
    assert blamed_prefills(typed(out["w"])) == ()


def test_admission_cap_ends_its_queue_where_the_timeline_draws_it():
    c = cases.by_id(cases.summarize(cases.capped_streams(), cases.cap_metrics(), cap=2))["c"]
    ev = typed(c)
    assert isinstance(ev, WaitEvidence) and ev.verdict == "admission_cap"
    assert queued_until_s(from_json(StreamRow, c)) == pytest.approx(1.001)


def test_a_crawl_reads_as_rationed_decode_with_its_two_rates():
    ev = typed(cases.by_id(cases.summarize(cases.rationing_pair(during_gap=1.0)))["m"])
    assert isinstance(ev, RationEvidence)
    assert (ev.crawl.during_tok_s, ev.crawl.steady_tok_s) == (pytest.approx(1.0), 40.0)
    assert ev.crawl.rationed and blamed_prefills(ev) == ("w",) and held_phases(ev) == ()


def test_a_preemption_stall_late_send_and_failure_each_read_as_their_own_type():
    s = stream("a", chunks=[0.1, *ticks(0.15, 18, 0.05), *ticks(3.0, 10, 0.05)])
    polls = [sample(t, preempt=p, kv=0.97) for t, p in ((0, 0), (1, 0), (2, 1), (3, 1), (4, 1))]
    stall = typed(cases.by_id(cases.summarize([s], polls))["a"])
    assert isinstance(stall, StallEvidence)
    assert (stall.gap_s, stall.preemptions, stall.wait) == (2.0, 1, None)
    late = typed(
        cases.by_id(cases.summarize([stream("l", intended=0.0, sent=0.2, chunks=[0.3, 0.4])]))["l"]
    )
    assert isinstance(late, LateEvidence) and late.late_s == pytest.approx(0.2)
    out = cases.by_id(
        cases.summarize([failed("x", sent=0.0, done=0.5), stream("ok", chunks=[0.1, 0.2])])
    )
    err = typed(out["x"])
    assert isinstance(err, ErrorEvidence) and (err.cls, err.http) == ("http_503", 503)


def client_error_over(server_verdict: str, server_evidence: dict) -> dict:
    """A client_limited row as verdicts.classify writes it: the server verdict's evidence, the
    client's own error evidence over it, and the verdict it overrode."""
    own = {"reason": "loadgen's own timing error 9.0 ms > tolerance 1.0 ms",
           "error_bound_s": 0.009, "tolerance_s": 0.001, "late_s": 0.0}  # fmt: skip
    return {"verdict": "client_limited",
            "evidence": server_evidence | own | {"server_verdict": server_verdict}}  # fmt: skip


def test_client_limited_by_its_own_error_keeps_the_server_verdict_it_overrode():
    wait = {"excess_s": 2.0, "held_s": {"admission_cap": 2.0},
            "phases": [{"state": "admission_cap", "from_s": 0.0, "to_s": 2.0}],
            "prefilling": ["x"], "reason": "queued"}  # fmt: skip
    row = client_error_over("admission_cap", wait)
    ev = typed(row)
    assert isinstance(ev, ClientErrorEvidence) and isinstance(ev.server, WaitEvidence)
    assert ev.error_bound_s == 0.009 and blamed_prefills(ev) == ("x",)
    assert held_phases(ev) == (WaitPhase("admission_cap", 0.0, 2.0),)
    # Late and over its error bound: the overridden verdict is itself client_limited.
    twice = typed(client_error_over("client_limited", {"reason": "late", "late_s": 0.1}))
    assert isinstance(twice, ClientErrorEvidence) and isinstance(twice.server, LateEvidence)


def test_the_report_evidence_cell_follows_the_type():
    rows = [
        client_error_over("admission_cap", {"excess_s": 2.0, "held_s": {"admission_cap": 2.0},
                                             "phases": [], "reason": "queued"}),
        client_error_over("admitted", {"reason": "within"}),
        {"verdict": "rationed_decode",
         "evidence": {"reason": "crawl", "fraction": 0.1, "rationed": True,
                      "during": {"tok_s": 2.0}, "steady": {"tok_s": 20.0}}},
    ]  # fmt: skip
    base = cases.by_id(cases.summarize([stream("s", chunks=[1.0, 1.1])]))["s"]
    streams = [base | {"id": f"s{i}"} | r for i, r in enumerate(rows)]
    cells = [row[-1] for row in waits_table({"streams": streams}).rows]
    assert cells == ["admission_cap=2.00s", "loadgen's own timing error 9.0 ms > tolerance 1.0 ms",
                     "2 vs 20 tok/s"]  # fmt: skip
