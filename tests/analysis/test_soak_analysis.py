"""Soak windows on hand-built records: exact splits, exact rates, counters per window."""

from __future__ import annotations

import pytest

from loadgen.analysis.soak import (
    analyze_soak,
    context_bins,
    soak_points,
    thirds,
    time_windows,
)
from loadgen.analysis.timeline import Timeline
from loadgen.scenario.soak_block import parse_window

from support.run_fixtures import S, sample, stream

# The seed's before-run thirds: three requests a third whose median is the seed's rate.
SEED_RATES = [85.0, 84.0, 80.0, 78.0, 77.2, 70.0, 61.0, 59.3, 50.0]


def request(i: int, rate: float, *, prompt: int = 1000, start: float | None = None):
    """Sent at 10 i s, first token 1 s later, then 10 more tokens at `rate` tok/s."""
    sent = 10.0 * i if start is None else start
    chunks = [sent + 1 + k / rate for k in range(11)]
    return stream(f"r{i}", chunks=chunks, tokens=[1] * 11, sent=sent, prompt=prompt,
                  done=chunks[-1] + 0.001)  # fmt: skip


def test_thirds_split_by_order_and_tile_the_soak() -> None:
    recs = [request(i, r) for i, r in enumerate(SEED_RATES)]
    ws = thirds(soak_points(recs))
    assert [w.label for w in ws] == ["first third", "middle third", "last third"]
    assert [[p.id for p in w.points] for w in ws] == [
        ["r0", "r1", "r2"], ["r3", "r4", "r5"], ["r6", "r7", "r8"]
    ]  # fmt: skip
    assert [(w.from_ns / S, w.to_ns / S) for w in ws] == [
        (0.0, 30.0), (30.0, 60.0), (60.0, pytest.approx(81 + 10 / 50 + 0.001))
    ]  # fmt: skip


def test_the_seeds_thirds_give_its_drop() -> None:
    recs = [request(i, r) for i, r in enumerate(SEED_RATES)]
    out = analyze_soak(recs, Timeline([]), [])
    medians = [w["decode_tok_s_median"] for w in out["windows"]]
    assert medians == pytest.approx([84.0, 77.2, 59.3], rel=1e-6)
    assert round(out["first_to_last"] * 100, 1) == -29.4
    assert out["windows"][0]["decode_tok_s_p10"] == pytest.approx(80.8, rel=1e-6)
    assert out["windows"][0]["ttft_s_median"] == pytest.approx(1.0)
    assert out["windows"][0]["prefill_tok_s_median"] == pytest.approx(1000.0)
    assert out["windows"][0]["context_mean"] == pytest.approx(1000 + 11 / 2)
    # Nine requests are too few for a trend: the verdict says so rather than guessing.
    assert out["verdict"]["verdict"] == "unresolved"
    assert out["client_watched"] is False


def test_uneven_counts_give_the_first_thirds_the_remainder() -> None:
    recs = [request(i, 50.0) for i in range(11)]
    assert [w["n"] for w in analyze_soak(recs, Timeline([]), [])["windows"]] == [4, 4, 3]


def test_server_counters_are_deltas_over_each_window() -> None:
    recs = [request(i, r) for i, r in enumerate(SEED_RATES)]
    samples = [
        sample(
            t,
            gen=g,
            prompt=p,
            hits=h,
            queries=q,
            kv=kv,
            preempt=0,
            drafts=d,
            draft_tokens=3 * d,
            accepted=a,
        )
        for t, g, p, h, q, kv, d, a in [
            (0, 0, 0, 0, 0, 0.1, 0, 0),
            (30, 33, 3000, 2400, 3000, 0.3, 10, 20),
            (60, 66, 6000, 4900, 6000, 0.5, 20, 41),
            (90, 99, 9000, 7400, 9000, 0.2, 30, 60),
        ]
    ]
    out = analyze_soak(recs, Timeline(samples), [])
    first, last = out["windows"][0]["server"], out["windows"][2]["server"]
    assert first["generation_tokens"] == 33 and first["prompt_tokens"] == 3000
    assert first["prefix_hit_rate"] == pytest.approx(0.8)
    assert first["spec_acceptance"] == pytest.approx(20 / 30)
    assert first["kv_peak_perc"] == pytest.approx(30.0)
    assert first["kv_mean_perc"] == pytest.approx(20.0)
    # The last window runs 60 s -> 81.2 s: the counter is read out to the next poll, at 90 s.
    assert last["counters"]["prefix_hits"] == 2500
    assert last["spec_acceptance"] == pytest.approx(19 / 30)


def test_fixed_time_windows_hold_the_requests_sent_inside() -> None:
    recs = [request(i, 50.0) for i in range(9)]
    ws = time_windows(soak_points(recs), 40.0)
    assert [[p.id for p in w.points] for w in ws] == [
        ["r0", "r1", "r2", "r3"], ["r4", "r5", "r6", "r7"], ["r8"]
    ]  # fmt: skip
    assert [w.label for w in ws] == ["0-0.667 min", "0.666667-1.33 min", "1.33333-1.35 min"]
    # A sim 20 times faster than the wall: a 2 min window of its clock is 6 s of the run's,
    # and is labelled in the server's minutes, as its rates are given.
    fast = time_windows(soak_points(recs), 6.0, speed=20)
    assert [w.label for w in fast][:2] == ["0-2 min", "2-4 min"]
    assert parse_window("5m") == 300.0 and parse_window("thirds") is None
    with pytest.raises(ValueError, match="use `thirds` or a length"):
        parse_window("fortnight")


def test_context_bins_follow_the_seeds_edges() -> None:
    recs = [request(0, 80.0, prompt=10_000), request(1, 70.0, prompt=12_000),
            request(2, 60.0, prompt=80_000)]  # fmt: skip
    (w,) = time_windows(soak_points(recs), 3600)
    assert context_bins(w) == [
        {"bin": "5-30K", "n": 2, "decode_tok_s_mean": pytest.approx(75.0)},
        {"bin": "70-90K", "n": 1, "decode_tok_s_mean": pytest.approx(60.0)},
    ]


def test_a_window_where_the_client_fell_behind_is_left_out() -> None:
    recs = [request(i, 50.0 if i < 20 else 25.0) for i in range(30)]
    # Self-watch every second; the loop was late by 200 ms all through the last third.
    client = [{"t_ns": t * S, "lag_max_ms": 200.0 if t >= 200 else 1.0, "cpu_s": t * 0.1,
               "rss_bytes": 100 * 2**20} for t in range(0, 302)]  # fmt: skip
    out = analyze_soak(recs, Timeline([]), client)
    assert [w["client"]["behind"] for w in out["windows"]] == [False, False, True]
    assert out["excluded_windows"] == ["last third"]
    assert out["windows"][0]["client"]["cpu_share"] == pytest.approx(0.1)
    assert out["verdict"]["n"] == 20
    assert out["verdict"]["verdict"] == "no drift"
    assert out["client_memory"] == {"measured": True, "first_mib": 100.0, "last_mib": 100.0,
                                    "change": 0.0, "flat": True}  # fmt: skip


def gpu_line(t_s: float, sm: float, power: float, throttle: int = 0) -> dict:
    gpus = [{"index": i, "sm_clock_mhz": sm, "power_w": power, "throttle": throttle}
            for i in range(2)]  # fmt: skip
    return {"t_ns": round(t_s * S), "source": "nvml", "gpus": gpus}


def test_gpu_clocks_are_ruled_out_only_when_flat_and_never_throttled() -> None:
    from loadgen.analysis.soak_types import read_soak
    from loadgen.report.soak_report import head_lines

    recs = [request(i, r) for i, r in enumerate(SEED_RATES)]
    # The idle bit is no slowdown: a GPU waiting between requests is not throttled.
    quiet = [gpu_line(5, 1980, 400, throttle=0x1), gpu_line(35, 1975, 410),
             gpu_line(65, 1980, 405)]  # fmt: skip
    out = analyze_soak(recs, Timeline([]), [], telemetry=quiet)
    assert [w["gpu"]["sm_clock_mhz_mean"] for w in out["windows"]] == [1980, 1975, 1980]
    assert out["windows"][0]["gpu"]["throttle_reasons"] == []
    assert out["clocks"]["ruled_out"] is True
    hot = [gpu_line(5, 1980, 400), gpu_line(35, 1900, 450), gpu_line(65, 1600, 700, 0x40 | 0x4)]
    out_hot = analyze_soak(recs, Timeline([]), [], telemetry=hot)
    assert out_hot["windows"][2]["gpu"]["throttle_reasons"] == [
        "sw_power_cap", "hw_thermal_slowdown"
    ]  # fmt: skip
    c = out_hot["clocks"]
    assert (c["ruled_out"], c["throttled_windows"]) == (False, ["last third"])
    assert c["sm_clock_change"] == pytest.approx(1600 / 1980 - 1)
    base = {"scenario": "s", "target": {}, "end": {}, "failed_streams": 0, "clock": "wall"}
    ok_line = [x for x in head_lines(read_soak(out | base)) if "GPU clocks" in x]
    assert ok_line == ["GPU clocks ruled out: SM 1980 -> 1980 MHz (+0.0%), no power or thermal "
                       "throttling in any window"]  # fmt: skip
    (bad,) = [x for x in head_lines(read_soak(out_hot | base)) if "GPU clocks" in x]
    assert bad.startswith("!! GPU clocks NOT ruled out: throttled (hw_thermal_slowdown, "
                          "sw_power_cap) in last third; SM 1980 -> 1600 MHz (-19.2%)")  # fmt: skip
    # No telemetry: nothing measured, nothing said.
    none = analyze_soak(recs, Timeline([]), [])
    assert none["clocks"] == {"measured": False}
    assert not [x for x in head_lines(read_soak(none | base)) if "GPU clocks" in x]
