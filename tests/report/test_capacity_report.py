"""The capacity report's sentences, composed from the search's structured end and the boundary's
evidence (analysis/capacity.py says what happened; the report says it)."""

from __future__ import annotations

from typing import Any

import pytest

from loadgen.analysis.capacity import Search, SloItem, answer
from loadgen.analysis.capacity_types import Boundary, CapacitySummary, read_capacity
from loadgen.codec import from_json, to_json
from loadgen.report.capacity_report import capacity_head, ended_text, move_text

SLO = (SloItem("ttft", 1.0, 0.9),)


SEARCH = Search("concurrency", 1, 256, max_steps=7)


def _summary(
    ended: str, *, search: Search = SEARCH, max_time_s: float | None = None, **result: Any
) -> CapacitySummary:
    c = {
        "scenario": "s", "target": None, "clock": "virtual", "over": "concurrency", "group": None,
        "slo": [to_json(i) for i in SLO], "search": to_json(search), "steps": [],
        "max_time_s": max_time_s, "capacity": None, "first_fail": None, "runs_at": {},
        "ended": ended, "boundary": None,
    } | result  # fmt: skip
    return read_capacity({"capacity": c})


@pytest.mark.parametrize(
    ("ended", "says"),
    [
        ("resolved", "resolved"),
        ("holds_at_max", "holds at --max: the SLO is met at every load tried"),
        ("fails_at_min", "fails at --min: no load tried meets the SLO"),
        ("max_steps", "stopped by --max-steps 7 before the boundary was resolved"),
        ("max_time", "stopped by --max-time 90 s before the boundary was resolved"),
        ("interrupted", "interrupted before the boundary was resolved"),
    ],
)
def test_each_end_of_a_search_is_said_as_itself(ended: str, says: str) -> None:
    assert ended_text(_summary(ended, max_time_s=90.0)) == says


def test_a_search_out_of_probes_below_max_does_not_claim_the_slo_holds_at_max() -> None:
    search = Search("concurrency", 1, 256, max_steps=2)
    probes = [{"value": v, "n": 4, "items": {"ttft_p90": {"attainment": 1.0}}} for v in (1, 2)]
    got = answer(probes, search, SLO)
    head = capacity_head(_summary(got["ended"], search=search, capacity=got["capacity"]))
    assert "capacity: at least 2 (stopped by --max-steps 2" in head[2]
    assert "holds at --max" not in head[2]


def _step(order: int, value: float, passes: bool) -> dict[str, Any]:
    return {"order": order, "value": value, "repeat": 0, "n": 20, "good": 18, "passes": passes,
            "items": {}, "verdicts": {}}  # fmt: skip


def test_a_pooled_pass_says_when_one_of_its_runs_missed_alone() -> None:
    # capacity_seats over rate: 11 req/s missed in one run (85% within) and met in the other;
    # the head said "meets the SLO in 2 run(s)".
    steps = [_step(1, 11, False), _step(2, 12, False), _step(3, 12, True), _step(4, 11, True)]
    head = capacity_head(_summary("resolved", steps=steps, capacity=11, first_fail=12,
                                  runs_at={"11": 2, "12": 2}))  # fmt: skip
    assert head[2].startswith(
        "capacity: 11 (meets the SLO pooled over 2 run(s), 1 of 2 met it alone; 12 misses it "
        "pooled over 2 run(s), 1 of 2 met it alone; interval [11, 12);"
    )
    steps = [_step(1, 11, True), _step(2, 12, False), _step(3, 12, False), _step(4, 11, True)]
    head = capacity_head(_summary("resolved", steps=steps, capacity=11, first_fail=12,
                                  runs_at={"11": 2, "12": 2}))  # fmt: skip
    assert "(meets the SLO pooled over 2 run(s); 12 misses it pooled over 2 run(s);" in head[2]


def _boundary(cause: str | None, **evidence: Any) -> Boundary:
    ev = {"missed": 3, "verdicts": {"x": 3}} | evidence
    return from_json(Boundary, {"cause": cause, "at": "concurrency=5", "evidence": ev})


def test_the_binding_cause_is_said_with_its_evidence() -> None:
    assert move_text(_boundary("admission_cap", cap=4, cap_source="sim")) == (
        "seats: max_num_seqs 4 (sim) is full at concurrency=5; more seats (or a smaller load) "
        "move the boundary"
    )
    whale = {"group": "whale", "streams": 2, "prompt_tokens": 32000}
    hol = move_text(_boundary("prefill_hol", prefilling=[whale], max_num_batched_tokens=2048))
    assert hol == (
        "prefill head-of-line: the missed streams waited behind the prefill of whale (32000 "
        "tokens); a smaller prefill budget (max_num_batched_tokens 2048) shares it, or those "
        "prompts go to another server"
    )
    # Without the server's budget or the prompts, the sentence says less, not something false.
    assert "behind the prefill of other prompts; a smaller prefill budget shares" in move_text(
        _boundary("prefill_hol", max_num_batched_tokens=None)
    )
    pool = move_text(_boundary("pool_pressure", kv_peak_perc=96.5, preemptions=None))
    assert pool.startswith("KV pool pressure: kv% peaked at 96.5 with ? preemptions at concurr")
    assert move_text(_boundary("rationed_decode", max_num_batched_tokens=512)).endswith(
        "a smaller prefill budget (max_num_batched_tokens 512) rations it less"
    )
    assert move_text(_boundary("decode_batch")).startswith("every missed stream was admitted")
    assert move_text(_boundary("own_prefill", ttft_p50_ms=2750.0)) == (
        "the prompts' own prefill: every missed stream was admitted without a wait the verdicts "
        "can blame and missed on TTFT alone (p50 2750.0 ms); shorter prompts, a faster prefill or "
        "a looser TTFT limit move the boundary, not seats or budget"
    )
    assert move_text(_boundary(None)) == "no stream missed the SLO"
