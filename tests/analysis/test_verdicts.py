"""Verdicts with their evidence on hand-built records and metrics timelines (exact values)."""

from __future__ import annotations

import pytest

from loadgen.analysis.baselines import inferred_cap
from loadgen.analysis.occupancy import admission_order
from loadgen.analysis.timeline import Timeline

from support.run_fixtures import failed, sample, stream, ticks
from support.verdict_cases import (
    by_id,
    cap_metrics,
    capped_streams,
    rationing_pair,
    summarize,
    whale_and_minnows,
)


def test_single_uncontended_stream_is_admitted_however_slow():
    s = stream("solo", prompt=4000, chunks=[5.0, *ticks(5.1, 20, 0.1)])
    out = by_id(summarize([s], [sample(t, running=1, waiting=0, kv=0.2) for t in range(8)]))
    v = out["solo"]
    assert v["verdict"] == "admitted"
    assert v["evidence"]["baseline"] == "uncontended_streams"
    assert v["evidence"]["expected_prefill_s"] == pytest.approx(5.0)


def test_sequential_streams_slow_one_is_admitted_with_a_note():
    fast = stream("a", prompt=1000, chunks=[0.1, 0.2, 0.3])
    slow = stream("b", prompt=1000, sent=1.0, chunks=[1.9, 2.0, 2.1])
    out = by_id(summarize([fast, slow]))
    # Baseline: the median of 10000 and 1111.1 tok/s = 5555.6: normal 0.18 s, excess 0.72 s,
    # unexplained (nothing else ran), so not blamed on anything.
    assert out["b"]["verdict"] == "admitted"
    assert out["b"]["evidence"]["wait"]["held_s"] == {"unexplained": pytest.approx(0.72)}
    assert "no cap, prefill or pool" in out["b"]["evidence"]["reason"]


def test_prefill_head_of_line_blocking():
    out = by_id(summarize(whale_and_minnows(), cap=4))
    assert out["w"]["verdict"] == "admitted"
    m1 = out["m1"]
    assert m1["verdict"] == "prefill_hol"
    ev = m1["evidence"]
    # Baseline 60000 tok / 60 s = 1000 tok/s (the whale, the fastest prefill): normal 4 s.
    assert ev["baseline"] == "fastest_stream"
    assert ev["expected_prefill_s"] == pytest.approx(4.0)
    assert ev["excess_s"] == pytest.approx(56.999)
    assert ev["held_s"] == {"prefill_hol": pytest.approx(56.999)}
    assert ev["phases"] == [{"state": "prefill_hol", "from_s": 0.001, "to_s": 57.0}]
    assert ev["prefilling"] == ["w"]
    assert (ev["cap"], ev["cap_source"]) == (4, "flags")
    # m3 is behind the whale and m1, m2 (same send time, earlier ids): all their prefills.
    assert out["m3"]["evidence"]["held_s"] == {"prefill_hol": pytest.approx(58.999)}
    assert out["m3"]["evidence"]["prefilling"] == ["m1", "m2", "w"]


def test_admission_cap_from_server_facts():
    out = by_id(summarize(capped_streams(), cap_metrics(), cap=2))
    assert out["a"]["verdict"] == "admitted"
    assert out["b"]["verdict"] == "admitted"  # 0.15 s <= 1.5 x 0.1 + 0.05
    c, d = out["c"], out["d"]
    assert c["verdict"] == d["verdict"] == "admission_cap"
    # c queued until a ended (1.001 s); its own prefill is the last 0.1 s.
    assert c["t_admit_s"] == pytest.approx(1.001)
    assert c["evidence"]["phases"] == [
        {"state": "admission_cap", "from_s": 0.0, "to_s": pytest.approx(1.001)}
    ]
    assert d["evidence"]["held_s"] == {"admission_cap": pytest.approx(2.001)}
    assert [(s["t_s"], s["running"], s["waiting"], s["kv"]) for s in c["evidence"]["samples"]] == [
        (0.0, 2.0, 2.0, 0.3),
        (0.5, 2.0, 2.0, 0.3),
        (1.0, 2.0, 1.0, 0.3),
    ]
    assert (c["evidence"]["cap"], c["evidence"]["cap_source"]) == (2, "flags")


def test_admission_cap_inferred_from_the_running_plateau():
    summary = summarize(capped_streams(), cap_metrics())
    assert summary["run"]["cap"] == {"value": 2, "source": "inferred"}
    c = by_id(summary)["c"]
    assert c["verdict"] == "admission_cap"
    assert c["evidence"]["cap_source"] == "inferred"


def test_requests_waiting_below_the_running_peak_do_not_make_a_cap():
    polls = [sample(0.0, running=3, waiting=1), sample(0.5, running=3, waiting=1)]
    polls += [sample(1.0, running=4, waiting=0), sample(1.5, running=4, waiting=1)]
    assert summarize(capped_streams(), polls)["run"]["cap"] == {"value": None, "source": None}


def test_no_cap_known_means_no_cap_blamed():
    c = by_id(summarize(capped_streams()))["c"]
    assert c["verdict"] == "admitted"
    assert c["evidence"]["wait"]["held_s"]["unexplained"] > 0


def served_out_of_send_order(gap: float):
    """Cap 2, four 1000-token streams `gap` s apart; the server served 1 and 3 at once (first
    tokens 0.1 s after sending) and 0 and 2 each when a seat freed (1's at 0.901, 3's at
    1.401), 0.1 s before their first token."""
    sent = [i * gap for i in range(4)]
    return [
        stream("s0", sent=sent[0], chunks=[1.001, *ticks(1.1, 9, 0.1)]),
        stream("s1", sent=sent[1], chunks=[sent[1] + 0.1, *ticks(0.2, 8, 0.1)]),
        stream("s2", sent=sent[2], chunks=[1.501, *ticks(1.6, 5, 0.1)]),
        stream("s3", sent=sent[3], chunks=[sent[3] + 0.11, *ticks(0.3, 12, 0.1)]),
    ]


def test_streams_sent_together_take_seats_in_the_order_they_were_served():
    out = by_id(summarize(served_out_of_send_order(gap=0.0003), cap=2))
    assert {k: v["verdict"] for k, v in out.items()} == {
        "s0": "admission_cap",
        "s1": "admitted",
        "s2": "admission_cap",
        "s3": "admitted",
    }
    assert {k: v["t_admit_s"] for k, v in out.items()} == {
        "s0": pytest.approx(0.901),
        "s1": pytest.approx(0.0003),
        "s2": pytest.approx(1.401),
        "s3": pytest.approx(0.0009),
    }
    assert out["s0"]["evidence"]["phases"] == [
        {"state": "admission_cap", "from_s": 0.0, "to_s": pytest.approx(0.901)}
    ]
    assert out["s2"]["evidence"]["held_s"] == {"admission_cap": pytest.approx(1.4004)}


def test_streams_sent_apart_keep_first_come_first_served_seats():
    # 50 ms apart: s0 and s1 held the seats, whatever their first tokens say; s3's first
    # token proves it was admitted at 0.26 s, so the model seats it then.
    out = by_id(summarize(served_out_of_send_order(gap=0.05), cap=2))
    assert {k: v["t_admit_s"] for k, v in out.items()} == {
        "s0": 0.0,
        "s1": pytest.approx(0.05),
        "s2": pytest.approx(0.901),
        "s3": pytest.approx(0.26),
    }
    assert {k: v["verdict"] for k, v in out.items()} == {
        "s0": "admitted",
        "s1": "admitted",
        "s2": "admission_cap",
        "s3": "admitted",
    }
    assert out["s0"]["evidence"]["wait"]["held_s"] == {"unexplained": pytest.approx(0.901)}
    assert out["s2"]["evidence"]["held_s"] == {
        "admission_cap": pytest.approx(0.801),
        "prefill_hol": pytest.approx(0.1),
        "unexplained": pytest.approx(0.4),
    }


def test_a_whale_seated_at_once_keeps_its_seat_though_its_first_token_came_last():
    # Sent together, cap 2: the whale and m1 got the seats, m1's short prefill went first and
    # m2 queued for m1's seat. By first token alone m2 would hold the whale's seat; less each
    # stream's normal prefill (10000 tok/s: 5 s, 0.1 s) the whale was seated first.
    w = stream("w", group="whale", prompt=50000, chunks=[5.0, *ticks(5.1, 10, 0.1)])
    m1 = stream("m1", sent=0.001, chunks=[0.101, *ticks(0.2, 8, 0.1)])
    m2 = stream("m2", sent=0.001, chunks=[1.001, *ticks(1.1, 5, 0.1)])
    out = by_id(summarize([w, m1, m2], cap=2))
    assert {k: v["verdict"] for k, v in out.items()} == {
        "w": "admitted",
        "m1": "admitted",
        "m2": "admission_cap",
    }
    assert out["w"]["t_admit_s"] == 0.0
    assert out["m2"]["t_admit_s"] == pytest.approx(0.901)
    assert out["m2"]["evidence"]["held_s"] == {"admission_cap": pytest.approx(0.9)}


def test_the_tie_window_is_measured_from_the_first_send_of_the_group():
    # a and b (4 ms apart) are unordered, so b, served first, goes first; c, 6 ms after a,
    # opens a new group and stays behind both although its first token came before theirs.
    records = [
        stream("a", chunks=[0.5, 0.6]),
        stream("b", sent=0.004, chunks=[0.104, 0.2]),
        stream("c", sent=0.006, chunks=[0.056, 0.1]),
    ]
    assert [r.id for r in admission_order(records)] == ["b", "a", "c"]


def cap_then_prefill(a_end: float):
    """Cap 2: a and b hold the seats; whale c queues for b's seat, then prefills until 6.0;
    minnow d queues for a's seat (until a_end + 1 ms), then waits behind c's prefill."""
    a_chunks = [0.1, *ticks(0.5, round((a_end - 0.5) / 0.5) + 1, 0.5)]
    return [
        stream("a", chunks=a_chunks),
        stream("b", chunks=[0.12, *ticks(0.2, 9, 0.1)]),
        stream("c", prompt=50000, sent=0.01, chunks=[6.0, *ticks(6.1, 10, 0.1)]),
        stream("d", sent=0.02, chunks=[6.1, *ticks(6.2, 5, 0.1)]),
    ]


def test_waiting_on_cap_then_on_prefill_longer_prefill_wins():
    out = by_id(summarize(cap_then_prefill(a_end=3.0), cap=2))
    assert out["c"]["verdict"] == "admitted"  # 5.99 s for 50000 tokens at 10000 tok/s
    d = out["d"]
    assert d["verdict"] == "prefill_hol"
    assert d["evidence"]["phases"] == [
        {"state": "admission_cap", "from_s": 0.02, "to_s": pytest.approx(3.001)},
        {"state": "prefill_hol", "from_s": pytest.approx(3.001), "to_s": 6.0},
    ]
    held = d["evidence"]["held_s"]
    assert held == {"admission_cap": pytest.approx(2.981), "prefill_hol": pytest.approx(2.999)}


def test_waiting_on_cap_then_on_prefill_longer_cap_wins():
    d = by_id(summarize(cap_then_prefill(a_end=3.5), cap=2))["d"]
    assert d["verdict"] == "admission_cap"
    held = d["evidence"]["held_s"]
    assert held == {"admission_cap": pytest.approx(3.481), "prefill_hol": pytest.approx(2.499)}
    assert [p["state"] for p in d["evidence"]["phases"]] == ["admission_cap", "prefill_hol"]


def test_rationed_decode_during_another_prefill():
    m = by_id(summarize(rationing_pair(during_gap=1.0)))["m"]
    assert m["verdict"] == "rationed_decode"
    ev = m["evidence"]
    assert ev["during"]["from_s"] == 2.0 and ev["during"]["to_s"] == 60.0
    assert ev["during"]["tokens"] == 58 and ev["during"]["tok_s"] == pytest.approx(1.0)
    assert ev["steady"]["tokens"] == 200 and ev["steady"]["tok_s"] == pytest.approx(40.0)
    assert ev["fraction"] == pytest.approx(0.025)
    assert ev["threshold"] == 0.25
    assert ev["prefilling"] == ["w"]


def test_a_later_short_prefill_does_not_swallow_the_steady_phase():
    late = stream("late", group="minnows", prompt=4000, sent=63.0, chunks=[63.1, 63.2, 63.3])
    m = by_id(summarize([*rationing_pair(during_gap=1.0), late]))["m"]
    assert m["verdict"] == "rationed_decode"
    assert m["evidence"]["steady"]["from_s"] == 60.0
    assert m["evidence"]["prefilling"] == ["w"]


def test_rationing_window_opens_when_a_whale_arrives_mid_decode():
    m = stream(
        "m",
        prompt=4000,
        chunks=[0.5, *ticks(1.0, 10, 0.1), *ticks(3.0, 28, 1.0), *ticks(30.05, 40, 0.05)],
    )
    w = stream("w", group="whale", prompt=30000, sent=2.0, chunks=[30.0, *ticks(30.1, 5, 0.1)])
    out = by_id(summarize([m, w]))["m"]
    ev = out["evidence"]
    assert out["verdict"] == "rationed_decode"
    assert (ev["during"]["from_s"], ev["during"]["to_s"]) == (2.0, 30.0)
    assert ev["during"]["tok_s"] == pytest.approx(1.0)
    assert ev["steady"]["tok_s"] == pytest.approx(20.0)


def test_a_short_rationed_blip_in_a_long_decode_is_no_crawl():
    m = stream("m", chunks=[0.5, 1.5, *ticks(1.55, 400, 0.05)])  # 1 s stall, then 20 s steady
    w = stream("w", group="whale", prompt=30000, sent=0.4, chunks=[1.5, 1.6, 1.7])
    out = by_id(summarize([m, w]))["m"]
    assert out["verdict"] == "admitted"
    assert out["evidence"]["decode"]["fraction"] == pytest.approx(0.05)  # 1 tok/s vs 20
    assert out["evidence"]["decode"]["rationed"] is False  # 1 s of a 21 s decode


def test_a_decode_wholly_inside_another_prefill_says_it_was_not_judged():
    # The whale prefills [0.4, 30); m decodes [1, 11) inside it and ends: no steady rate to
    # compare with. At a 256-token budget politeness's minnows crawled at 45 tok/s this way
    # (211 elsewhere) and read "admitted" as if judged.
    m = stream("m", chunks=[1.0, *ticks(1.1, 100, 0.1)])
    w = stream("w", group="whale", prompt=30000, sent=0.4, chunks=[30.0, 30.1, 30.2])
    out = by_id(summarize([m, w]))["m"]
    assert out["verdict"] == "admitted" and "decode" not in out["evidence"]
    assert out["evidence"]["reason"].endswith(
        "; decode not judged for rationing: it ran inside others' prefills with no steady "
        "stretch after them to compare"
    )
    # Judged where a steady stretch follows: the reason stays the admission's own.
    judged = by_id(summarize(rationing_pair(during_gap=0.05)))["m"]
    assert "not judged" not in judged["evidence"]["reason"]


def test_decode_at_half_the_steady_rate_is_not_rationed():
    m = by_id(summarize(rationing_pair(during_gap=0.05)))["m"]
    assert m["verdict"] == "admitted"
    assert m["evidence"]["decode"]["fraction"] == pytest.approx(0.5)


def test_every_prefill_stretch_is_judged_and_steady_skips_them_all():
    # m decodes at 10 tok/s; a sibling's short prefill [0, 2) overlaps its first decode second
    # (no slowdown), the whale's [10, 40) rations it to 1 tok/s, a late stream's [44.05, 45.05)
    # is a hole in the steady phase after the whale.
    m_chunks = [1.0, *ticks(1.05, 90, 0.1), *ticks(10.5, 30, 1.0), *ticks(40.1, 100, 0.1)]
    m = stream("m", group="minnows", chunks=m_chunks)
    sibling = stream("s", group="minnows", chunks=[2.0, 2.1, 2.2])
    w = stream("w", group="whale", prompt=30000, sent=10.0, chunks=[40.0, 40.1, 40.2])
    late = stream("late", group="minnows", sent=44.05, chunks=[45.05, 45.15, 45.25])
    out = by_id(summarize([m, sibling, w, late]))["m"]
    ev = out["evidence"]
    assert out["verdict"] == "rationed_decode"
    assert ev["prefilling"] == ["w"]
    assert (ev["during"]["from_s"], ev["during"]["to_s"]) == (10.0, 40.0)
    assert ev["during"]["tokens"] == 30 and ev["during"]["tok_s"] == pytest.approx(1.0)
    # Steady: (40, 44.05] and (45.05, 50]: 40 + 50 tokens over 9 s.
    steady = ev["steady"]
    assert (steady["from_s"], steady["to_s"]) == (40.0, 50.0)
    assert steady["excluded_s"] == pytest.approx(1.0)
    assert steady["tokens"] == 90 and steady["tok_s"] == pytest.approx(10.0)
    assert ev["fraction"] == pytest.approx(0.1)


def test_pool_pressure_while_waiting():
    a = stream("a", chunks=[0.1, *ticks(0.2, 49, 0.1)])
    b = stream("b", chunks=[3.0, *ticks(3.1, 10, 0.1)])
    polls = [sample(t / 2, running=1, waiting=1, kv=0.99, preempt=0) for t in range(6)]
    polls += [sample(t / 2, running=2, waiting=0, kv=0.6, preempt=0) for t in range(6, 12)]
    out = by_id(summarize([a, b], polls, cap=4))
    ev = out["b"]["evidence"]
    assert out["b"]["verdict"] == "pool_pressure"
    assert ev["held_s"] == {"pool_pressure": pytest.approx(2.9)}
    assert len(ev["samples"]) == 6
    assert ev["samples"][0] == {
        "t_s": 0.0,
        "running": 1.0,
        "waiting": 1.0,
        "kv": 0.99,
        "preemptions": 0.0,
    }
    assert ev["samples"][-1]["t_s"] == 3.0


def test_pool_pressure_from_a_preemption_stall_in_decode():
    s = stream("a", chunks=[0.1, *ticks(0.15, 18, 0.05), *ticks(3.0, 10, 0.05)])
    polls = [sample(t, preempt=p, kv=0.97) for t, p in ((0, 0), (1, 0), (2, 1), (3, 1), (4, 1))]
    a = by_id(summarize([s], polls))["a"]
    ev = a["evidence"]
    assert a["verdict"] == "pool_pressure"
    assert ev["stall"] == {"from_s": 1.0, "to_s": 3.0, "gap_s": 2.0}
    assert ev["median_gap_s"] == pytest.approx(0.05)
    assert ev["preemptions"] == 1


def test_client_limited_when_loadgen_sent_late():
    summary = summarize([stream("late", intended=0.0, sent=0.2, chunks=[0.3, 0.4, 0.5])])
    s = by_id(summary)["late"]
    assert s["verdict"] == "client_limited"
    assert s["evidence"]["late_s"] == pytest.approx(0.2)
    assert s["ttft_intended_s"] == pytest.approx(0.3) and s["ttft_s"] == pytest.approx(0.1)
    assert summary["run"]["client_limited"] is True


def test_error_verdict_names_its_class():
    summary = summarize([failed("x", sent=0.0, done=0.5), stream("ok", chunks=[0.1, 0.2])])
    s = by_id(summary)["x"]
    assert s["verdict"] == "error"
    assert s["evidence"]["class"] == "http_503"
    assert s["evidence"]["http"] == 503
    assert summary["run"]["verdicts"] == {"admitted": 1, "error": 1}


def preempted_queue(waiting_after_preemption: int) -> list:
    """Cap 4, pool size unknown: p is preempted between the polls at 0.5 and 1.0; q, sent at
    1.0, waits 2 s while kv climbs 0.82 -> 0.96 and the preemption counter stays flat."""
    polls = [
        sample(0.0, running=1, waiting=0, kv=0.3, preempt=0),
        sample(0.5, running=2, waiting=0, kv=0.6, preempt=0),
        sample(1.0, running=1, waiting=waiting_after_preemption, kv=0.5, preempt=1),
    ]
    polls += [
        sample(t, running=1, waiting=2, kv=kv, preempt=1)
        for t, kv in ((1.5, 0.82), (2.0, 0.88), (2.5, 0.96))
    ]
    polls += [sample(t, running=2, waiting=0, kv=0.5, preempt=1) for t in (3.0, 3.5)]
    return polls


def preempted_queue_streams() -> list:
    return [
        stream("a", chunks=[0.1, *ticks(0.2, 40, 0.1)]),  # alone in its wait: 10000 tok/s
        stream("p", sent=0.5, chunks=[0.6, *ticks(0.65, 3, 0.05), *ticks(3.05, 5, 0.05)]),
        stream("q", sent=1.0, chunks=[3.1, *ticks(3.2, 5, 0.1)]),
    ]


def test_a_wait_behind_an_unresolved_preemption_is_pool_pressure():
    out = by_id(summarize(preempted_queue_streams(), preempted_queue(1), cap=4))
    q = out["q"]
    assert q["verdict"] == "pool_pressure"
    assert q["evidence"]["phases"] == [{"state": "pool_pressure", "from_s": 1.0, "to_s": 3.0}]
    assert q["evidence"]["held_s"] == {"pool_pressure": pytest.approx(2.0)}
    assert out["p"]["verdict"] == "pool_pressure"
    assert out["p"]["evidence"]["stall"]["gap_s"] == pytest.approx(2.3)


def test_a_preemption_whose_queue_drained_explains_no_later_wait():
    q = by_id(summarize(preempted_queue_streams(), preempted_queue(0), cap=4))["q"]
    assert q["verdict"] == "admitted"
    assert q["evidence"]["wait"]["held_s"] == {"unexplained": pytest.approx(2.0)}


def blocked_prompt_streams() -> list:
    """Cap 4, 1500-token prompts (94 of 16-token blocks): a, b decode; c prefills slowly until
    1.0; d, sent at 0.45, waits until 3.0 while the polls show running 3, waiting 1, kv 0.75."""
    return [
        stream("a", prompt=1500, chunks=[0.1, *ticks(0.2, 28, 0.1)]),  # alone: 15000 tok/s
        stream("b", prompt=1500, sent=0.2, chunks=[0.3, *ticks(0.4, 40, 0.1)]),
        stream("c", prompt=1500, sent=0.4, chunks=[1.0, *ticks(1.1, 30, 0.1)]),
        stream("d", prompt=1500, sent=0.45, chunks=[3.1, *ticks(3.2, 5, 0.1)]),
    ]


def blocked_prompt_polls() -> list:
    polls = [sample(0.0, running=1, waiting=0, kv=0.25)]
    polls += [sample(t / 2, running=3, waiting=1, kv=0.75) for t in range(1, 6)]
    return [*polls, sample(3.0, running=3, waiting=0, kv=0.75)]


def test_a_queued_prompt_the_free_pool_cannot_hold_is_pool_pressure():
    # 300 blocks: kv 0.75 + 94/300 >= 0.98. d is the one the waiting count covers (the latest
    # arrival without a first token), so the pool, not c's prefill ahead, holds it.
    out = by_id(summarize(blocked_prompt_streams(), blocked_prompt_polls(), cap=4, pool_blocks=300))
    d = out["d"]
    assert d["verdict"] == "pool_pressure"
    assert d["evidence"]["phases"] == [{"state": "pool_pressure", "from_s": 0.45, "to_s": 3.0}]
    # c was running (prefilling), not queued: the same kv is no evidence against it.
    assert out["c"]["verdict"] == "admitted"
    assert out["c"]["evidence"]["wait"]["held_s"] == {"unexplained": pytest.approx(0.5)}


def test_a_queued_prompt_that_fits_the_free_pool_is_not_pool_pressure():
    out = by_id(summarize(blocked_prompt_streams(), blocked_prompt_polls(), cap=4, pool_blocks=600))
    d = out["d"]
    assert d["verdict"] == "admitted"
    held = d["evidence"]["wait"]["held_s"]
    assert held == {"prefill_hol": pytest.approx(0.55), "unexplained": pytest.approx(2.0)}


@pytest.mark.parametrize(
    ("kv", "preempt_step", "cap"),
    [
        (0.6, 0, 3),  # room for a 4th at 0.2 each: a cap of 3
        (0.75, 0, None),  # 0.75 + 0.25 >= 0.98: the pool may hold the 4th
        (0.3, 1, None),  # preemptions during the plateau: the pool was preempting
    ],
)
def test_a_running_plateau_is_a_cap_only_with_room_in_the_pool(kv, preempt_step, cap):
    polls = [sample(t / 2, running=3, waiting=1, kv=kv, preempt=t * preempt_step) for t in range(4)]
    assert inferred_cap(Timeline(polls)) == cap


def hol_then_stall(stall_s: float):
    """b waits 1 s behind a's prefill (a ahead, same send time), then its decode stalls
    `stall_s` while the preemption counter rises."""
    a = stream("a", prompt=10000, chunks=[1.0, *ticks(1.05, 60, 0.05)])
    resume = 2.1 + stall_s
    b = stream("b", chunks=[1.1, *ticks(1.15, 20, 0.05), *ticks(resume, 20, 0.05)])
    polls = [sample(t / 2, kv=0.3, preempt=0 if t / 2 <= 2.0 else 1) for t in range(10)]
    return [a, b], polls


def test_one_verdict_a_longer_wait_beats_a_shorter_preemption_stall():
    b = by_id(summarize(*hol_then_stall(0.6), cap=4))["b"]
    assert b["verdict"] == "prefill_hol"
    assert b["evidence"]["held_s"] == {"prefill_hol": pytest.approx(1.0)}
    assert b["evidence"]["preemption"]["stall"] == {
        "from_s": 2.1,
        "to_s": pytest.approx(2.7),
        "gap_s": pytest.approx(0.6),
    }
    assert b["evidence"]["preemption"]["cost_s"] == pytest.approx(0.55)


def test_one_verdict_a_longer_preemption_stall_beats_a_shorter_wait():
    b = by_id(summarize(*hol_then_stall(1.6), cap=4))["b"]
    assert b["verdict"] == "pool_pressure"
    assert b["evidence"]["cost_s"] == pytest.approx(1.55)
    assert b["evidence"]["wait"]["verdict"] == "prefill_hol"
    assert b["evidence"]["wait"]["held_s"] == {"prefill_hol": pytest.approx(1.0)}
