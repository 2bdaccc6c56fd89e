"""Joint-decode aggregates, server-window facts and whale interference (exact values)."""

from __future__ import annotations

import pytest

from loadgen.analysis.aggregate import joint_decode, reps_wall_s, server_window
from loadgen.analysis.inputs import RunInputs
from loadgen.analysis.summary import analyze
from loadgen.analysis.summary_types import ServerWindow
from loadgen.analysis.timeline import Timeline
from loadgen.codec import from_json
from loadgen.report.text import polled_lines, render_plain
from loadgen.run_manifest import RunManifest

from support.run_fixtures import manifest, ns, sample, stream, ticks

S = 1_000_000_000


def cohort(last1: float = 3.0):
    return [
        stream("s1", chunks=ticks(1.0, round((last1 - 1.0) / 0.1) + 1, 0.1)),
        stream("s2", chunks=ticks(1.5, 26, 0.1)),  # 1.5 .. 4.0
        stream("s3", chunks=ticks(2.0, 31, 0.1)),  # 2.0 .. 5.0
    ]


# Polls every 0.25 s, off the window edges; the counter grows 30 tok/s.
GEN_POLLS = [sample(0.3 + k / 4, gen=30 * (0.3 + k / 4)) for k in range(21)]
COARSE_POLLS = [sample(0.0, gen=0), sample(1.5, gen=10), sample(2.5, gen=40), sample(3.5, gen=70)]


def test_the_reps_wall_leaves_out_the_gap_between_reps():
    # Rep 0 spans 0.0 .. 2.0 s, rep 1 spans 2.5 .. 3.5 s (two streams, one late): the 0.5 s
    # between them is loadgen's own (scrapes at the rep's edges), so 3.0 s, not the run's 3.5.
    recs = [
        stream("a", chunks=ticks(0.5, 16, 0.1), done=2.0),
        stream("b", rep=1, sent=2.5, chunks=ticks(2.7, 4, 0.1), done=3.0),
        stream("c", rep=1, sent=2.6, chunks=ticks(2.8, 7, 0.1), done=3.5),
    ]
    assert reps_wall_s(recs) == pytest.approx(3.0)
    assert reps_wall_s([]) is None


def test_joint_decode_window_server_counter_and_client_cross_check():
    recs = cohort()
    jd = joint_decode(recs, recs, Timeline(GEN_POLLS))
    assert jd["steady"] is True
    assert jd["window"] == {"from_s": 2.0, "to_s": 3.0, "duration_s": 1.0, "kind": "joint"}
    # Counter interpolated at 2.0 s (60) and 3.0 s (90).
    assert jd["server"]["tokens"] == pytest.approx(30.0)
    assert jd["server"]["edges"] == {"open": "interpolated", "close": "interpolated"}
    assert jd["server"]["polls_inside"] == 4
    assert jd["server"]["resolvable"] is True
    # Client: each stream's 10 chunks in (2.0, 3.0].
    assert jd["client"]["tokens"] == 30 and jd["client"]["chunks"] == 30
    assert (jd["tok_s"], jd["token_source"]) == (pytest.approx(30.0), "server_counter")
    assert jd["cross_check"] == pytest.approx(1.0)
    assert jd["per_stream_tok_s"]["mean"] == pytest.approx(10.0)
    assert jd["shared_with"] == []


def test_server_counter_is_not_the_headline_over_a_window_shorter_than_its_polls():
    recs = cohort()
    jd = joint_decode(recs, recs, Timeline(COARSE_POLLS))
    # Counter at 2.0 s: 10 + (40 - 10) * 0.5 = 25; at 3.0 s: 40 + 30 * 0.5 = 55.
    assert jd["server"]["tokens"] == pytest.approx(30.0)
    assert jd["server"]["polls_inside"] == 1
    assert jd["server"]["resolvable"] is False  # 1 s window, polls ~1.2 s apart
    assert (jd["tok_s"], jd["token_source"]) == (pytest.approx(30.0), "usage_continuous")


def test_joint_decode_not_steady_is_decode_tokens_over_the_time_some_stream_decoded():
    recs = cohort(last1=1.8)  # s1 (1.0-1.8) finished before s3's first token (2.0)
    jd = joint_decode(recs, recs, Timeline(GEN_POLLS))
    assert jd["steady"] is False
    # s1 and s2 overlap, s3 overlaps s2: some stream decoded from 1.0 to 5.0 without a gap.
    assert jd["window"] == {"from_s": 1.0, "to_s": 5.0, "duration_s": 4.0, "kind": "decoding",
                            "decoding_s": 4.0}  # fmt: skip
    # Decode tokens, each stream's first chunk excluded (the per-stream rate's units): 8+25+30.
    assert jd["client"]["tokens"] == 8 + 25 + 30
    assert (jd["tok_s"], jd["token_source"]) == (pytest.approx(63 / 4), "usage_continuous")
    assert jd["server"] is None  # a counter is not cut at every stream's first and last chunk
    assert jd["peak_decoding"] == 2


def _one_seat() -> list:
    """Three streams through one seat, each with its own prefill gap and decode rate:
    10 tokens in 1 s (10 tok/s), 20 in 1 s (20 tok/s), 10 in 2 s (5 tok/s)."""
    return [
        stream("s1", chunks=ticks(1.0, 11, 0.1)),  # 1.0 .. 2.0
        stream("s2", chunks=ticks(2.5, 21, 0.05)),  # 2.5 .. 3.5
        stream("s3", chunks=ticks(4.0, 11, 0.2)),  # 4.0 .. 6.0
    ]


def test_at_concurrency_one_the_aggregate_is_the_per_stream_rate():
    # The span 1.0 -> 6.0 holds two prefills (2.0-2.5, 3.5-4.0) in which nothing decoded:
    # over it the aggregate read 42 / 5 = 8.4 tok/s, below each stream's own average.
    recs = _one_seat()
    jd = joint_decode(recs, recs, Timeline([]))
    assert jd["window"]["decoding_s"] == pytest.approx(4.0)
    assert jd["tok_s"] == pytest.approx(40 / 4)
    assert jd["per_stream_tok_s"]["pooled"] == pytest.approx(40 / 4)
    assert jd["per_stream_tok_s"]["mean"] == pytest.approx((10 + 20 + 5) / 3)
    assert (jd["n"], jd["peak_decoding"]) == (3, 1)


def test_two_seats_decode_at_twice_the_per_stream_rate():
    # Two streams fully overlapping at 10 tok/s each: the aggregate is 2 x the per-stream.
    recs = [stream("a", chunks=ticks(1.0, 11, 0.1)), stream("b", chunks=ticks(1.0, 11, 0.1)),
            stream("c", chunks=ticks(3.0, 11, 0.1))]  # fmt: skip
    jd = joint_decode(recs, recs, Timeline([]))
    assert jd["steady"] is False
    assert jd["window"]["decoding_s"] == pytest.approx(2.0)
    assert jd["per_stream_tok_s"]["pooled"] == pytest.approx(10.0)
    assert jd["tok_s"] == pytest.approx(30 / 2)
    assert jd["peak_decoding"] == 2


def test_server_counter_is_not_the_headline_when_other_streams_decode_in_the_window():
    recs = cohort()
    other = stream("x", group="other", chunks=ticks(0.5, 40, 0.1))
    jd = joint_decode(recs, [*recs, other], Timeline(GEN_POLLS))
    assert jd["shared_with"] == ["x"]
    assert jd["token_source"] == "usage_continuous"
    assert jd["tok_s"] == pytest.approx(30.0)


def test_counter_edges_outside_the_polls_are_nearest():
    recs = cohort()
    jd = joint_decode(recs, recs, Timeline([sample(2.5, gen=40), sample(2.75, gen=50)]))
    assert jd["server"]["edges"] == {"open": "nearest", "close": "nearest"}
    assert jd["server"]["tokens"] == pytest.approx(10.0)


def spec_streams(token_source: str = "usage_continuous"):
    """Speculative decoding: one chunk per engine step, 3 tokens per step after the first."""
    tokens = [1] + [3] * 10
    keep = token_source == "usage_continuous"
    return [
        stream(
            f"s{i}",
            chunks=ticks(1.0 + i * 0.01, 11, 0.1),
            tokens=tokens if keep else None,
            completion=31,
            token_source=token_source,
        )
        for i in range(2)
    ]


@pytest.mark.parametrize("token_source", ["usage_continuous", "usage_final"])
def test_spec_decoding_rates_are_token_true(token_source):
    summary = analyze(RunInputs(manifest(), spec_streams(token_source), [])).summary
    g = summary["groups"]["g"]
    assert g["decode_tok_s"]["median"] == pytest.approx(30.0)
    assert g["chunks_per_s"]["median"] == pytest.approx(10.0)
    assert g["tokens_per_chunk"]["median"] == pytest.approx(31 / 11)
    assert g["itl_token_ms"]["p50"] == pytest.approx(100 / 3)
    assert g["itl_chunk_ms"]["p50"] == pytest.approx(100.0)
    jd = summary["reps"][0]["joint_decode"]
    # Window (1.01, 2.0]: s0 has 10 chunks in it, s1 9 (its first is the window's opening).
    assert jd["client"]["chunks"] == 19
    assert jd["client"]["tokens"] == pytest.approx(57.0)
    assert jd["client"]["tok_s"] == pytest.approx(57 / 0.99)
    assert jd["client"]["chunks_per_s"] == pytest.approx(19 / 0.99)


def test_spec_decoding_report_shows_chunks_and_tokens_apart():
    text = render_plain(analyze(RunInputs(manifest(), spec_streams(), [])).summary)
    assert "decode tok/s min/med/max" in text and "chunks/s min/med/max" in text
    decode_row = next(
        line for line in text.splitlines() if line.startswith("g ") and "30.0" in line
    )
    assert "10.0" in decode_row and "2.82" in decode_row
    assert "agg chunks/s" in text
    # What was seen, not a cause: this run's server reported no speculative decoding.
    assert "g: 20 of 22 chunks carried >1 token; tokens/chunk = 2.82" in text
    assert "specul" not in text


def metrics_run():
    values = {
        0.0: dict(running=0, waiting=0, kv=0.1, preempt=0, hits=0, queries=0, drafts=0,
                  draft_tokens=0, accepted=0, step_sum=0, step_count=0, gen=0),
        1.0: dict(running=4, waiting=2, kv=0.5, preempt=1, hits=50, queries=100, drafts=10,
                  draft_tokens=70, accepted=21, step_sum=310, step_count=10, gen=31),
        2.0: dict(running=4, waiting=2, kv=0.985, preempt=2, hits=150, queries=200, drafts=30,
                  draft_tokens=210, accepted=63, step_sum=930, step_count=30, gen=93),
        3.0: dict(running=4, waiting=1, kv=0.7, preempt=2, hits=150, queries=300, drafts=40,
                  draft_tokens=280, accepted=84, step_sum=1240, step_count=40, gen=124),
    }  # fmt: skip
    return [sample(t, **v) for t, v in values.items()]


def test_server_window_facts():
    srv = server_window(Timeline(metrics_run()), 0, 3 * S)
    assert srv["kv_peak_perc"] == pytest.approx(98.5) and srv["kv_peak_t_s"] == 2.0
    assert srv["window"]["duration_s"] == 3.0 and srv["polls"] == 4
    assert srv["poll_interval_s"] == 1.0
    assert srv["preemptions"] == 2
    assert srv["prefix_hit_rate"] == pytest.approx(0.5)
    assert srv["spec_acceptance"] == pytest.approx(0.3)
    assert srv["spec_emitted_per_step"] == pytest.approx((84 + 40) / 40)
    assert srv["tokens_per_step"] == pytest.approx(31.0)
    assert srv["generation_tok_s"] == pytest.approx(124 / 3)
    assert srv["running"] == {
        "max": 4.0,
        "plateau": {"value": 4.0, "from_s": 1.0, "to_s": 3.0, "duration_s": 2.0, "samples": 3},
    }
    assert srv["waiting"]["plateau"]["value"] == 2.0
    assert srv["waiting"]["plateau"]["duration_s"] == 1.0


def test_no_server_metrics_everything_still_works():
    summary = analyze(RunInputs(RunManifest(), cohort(), [])).summary
    assert summary["run"]["server"] == {"available": False, "note": "no server metrics"}
    assert "no server metrics" in render_plain(summary)
    assert summary["reps"][0]["joint_decode"]["token_source"] == "usage_continuous"


def test_whale_interference_during_and_after_its_prefill():
    w = stream("w", group="whale", prompt=60000, chunks=[60.0, *ticks(60.04, 100, 0.04)])
    live = stream(
        "m1", group="minnows", prompt=4000, sent=0.001,
        chunks=[2.0, *ticks(3.0, 58, 1.0), *ticks(60.025, 200, 0.025)],
    )  # fmt: skip
    queued = stream("m2", group="minnows", prompt=4000, sent=0.001, chunks=ticks(61.0, 50, 0.05))
    summary = analyze(RunInputs(manifest(), [w, live, queued], [])).summary
    mixed = summary["mixed"]
    assert (mixed["whale"], mixed["minnows"]) == ("whale", ["minnows"])
    inter = mixed["reps"][0]["interference"][0]
    assert inter["whale_prefill"] == {"from_s": 0.0, "to_s": 60.0, "duration_s": 60.0}
    m1, m2 = inter["minnows"]
    assert (m1["id"], m1["first_token"], m1["ttft_s"]) == ("m1", "during", pytest.approx(1.999))
    assert m1["decode_during"]["tok_s"] == pytest.approx(1.0)
    assert m1["decode_during"]["token_source"] == "usage_continuous"
    assert m1["decode_after"]["tok_s"] == pytest.approx(40.0)
    assert (m2["first_token"], m2["decode_during"]) == ("after", None)
    assert m2["decode_after"]["tok_s"] == pytest.approx(20.0)
    text = render_plain(summary)
    assert "Whale + minnows" in text
    row = next(line for line in text.splitlines() if line.startswith("rep 0"))
    assert row.split() == [
        "rep",
        "0",
        "60.0",
        "1.999/31.5/61.0",
        "1.0",
        "(1",
        "queued)",
        "20.0-40.0",
        "65.0",
    ]
    # A whale done prefilling before its minnows are sent (a cached whale, 0.39 s, minnows
    # 0.5 s behind) says so, where its row read "-" as if a figure were lost.
    fast = stream("w", group="whale", prompt=60000, chunks=ticks(0.4, 100, 0.04))
    later = [stream(f"m{i}", group="minnows", prompt=4000, sent=0.5, chunks=ticks(0.8, 20, 0.05))
             for i in range(2)]  # fmt: skip
    text = render_plain(analyze(RunInputs(manifest(), [fast, *later], [])).summary)
    row = next(line for line in text.splitlines() if line.startswith("rep 0"))
    assert row.split()[3:7] == ["none", "in", "its", "prefill"]


def test_a_whale_lists_only_the_minnows_in_flight_during_its_prefill():
    # Two whales, prefills [0, 10) and [20, 30): each lists the minnows sent before its prefill
    # ended and not done before it began. Every minnow of the rep was once listed under every
    # whale, so a minnow done at 5 s counted as "queued" behind the whale that began at 20 s.
    w1 = stream("w1", group="whale", prompt=60000, chunks=[10.0, 10.5])
    w2 = stream("w2", group="whale", prompt=60000, sent=20.0, chunks=[30.0, 30.5])
    early = stream("a", group="minnows", prompt=400, sent=0.5, chunks=[1.0, 2.0, 5.0])
    queued = stream("b", group="minnows", prompt=400, sent=9.0, chunks=[12.0, 13.0])
    between = stream("c", group="minnows", prompt=400, sent=14.0, chunks=[15.0, 16.0])
    spans = stream("d", group="minnows", prompt=400, sent=8.0, chunks=[9.0, 25.0, 31.0])
    late = stream("e", group="minnows", prompt=400, sent=30.0, chunks=[31.0, 32.0])
    summary = analyze(
        RunInputs(manifest(), [w1, w2, early, queued, between, spans, late], [])
    ).summary
    inter = summary["mixed"]["reps"][0]["interference"]
    listed = {i["whale"]: [(m["id"], m["first_token"]) for m in i["minnows"]] for i in inter}
    assert listed == {
        "w1": [("a", "during"), ("d", "during"), ("b", "after")],
        "w2": [("d", "during")],
    }


def test_the_poll_interval_is_the_windows_own():
    # A burst of scrapes at the run's start (0 to 4 ms), then a poll every 0.25 s: the window
    # [0.5, 1.5] s polled every 0.25 s. Over all the run's polls the median gap was 1 ms.
    times = [0.0, 0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5]
    polls = Timeline([sample(t, running=1) for t in times])
    assert server_window(polls, S // 2, 3 * S // 2)["poll_interval_s"] == 0.25
    # Fewer than two polls inside: no interval to tell.
    assert server_window(polls, S // 10, S // 5)["poll_interval_s"] is None
    # Scrapes at one instant (a virtual run's rep edges) are no interval: it read 0.000 s.
    edges = Timeline([sample(t, running=1) for t in (0.0, 0.0, 1.0, 1.0)])
    assert server_window(edges, 0, S)["poll_interval_s"] == 1.0


def test_a_window_the_polls_fall_short_of_says_the_part_they_cover():
    # Polls every 0.5 s to 4 s, 100 tokens a poll (200 tok/s), the measured window to 8.4 s
    # (a metrics.jsonl cut in half): its table read "generation tok/s 0.0 over 8.376 s".
    polls = Timeline([sample(i / 2, gen=100 * i, kv=0.3) for i in range(9)])
    cut = server_window(polls, 0, ns(8.4))
    assert cut["polled"] == {"from_s": 0.0, "to_s": 4.0, "duration_s": 4.0}
    assert cut["generation_tokens"] == 800 and cut["generation_tok_s"] is None
    text = polled_lines(from_json(ServerWindow, cut))
    assert text == ["!! METRICS GAP: the server's polls cover 0.000-4.000 s of the measured "
                    "0.000-8.400 s: its counters and peaks are of that part, and generation "
                    "tok/s is not given"]  # fmt: skip
    # Ends within three poll intervals of the polls: covered, the rate over the window given.
    whole = server_window(polls, ns(0.2), ns(4.0))
    assert whole["polled"] is None and whole["generation_tok_s"] == pytest.approx(200.0)
    assert polled_lines(from_json(ServerWindow, whole)) == []
    # A window no poll comes near: nothing to say of it, rather than zeros.
    far = server_window(polls, ns(20), ns(30))
    assert far["available"] is False and "no poll of the server" in far["note"]
