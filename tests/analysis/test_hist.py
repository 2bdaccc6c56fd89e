"""HdrHistograms: values, hlog round trip and merge, out-of-range values counted."""

from __future__ import annotations

from pathlib import Path

from loadgen.analysis.hist import (
    HIST_METRICS,
    build_histograms,
    hlog_name,
    merge_hlogs,
    percentile_curve,
    read_hlog,
    write_hlogs,
)

from support.run_fixtures import stream, ticks


def two_reps():
    return [
        stream("a0", rep=0, intended=0.0, sent=0.05, chunks=ticks(0.25, 5, 0.1)),
        stream("b0", rep=0, chunks=ticks(0.4, 5, 0.1)),
        stream("a1", rep=1, sent=10.0, chunks=ticks(10.3, 5, 0.1)),
    ]


def test_histogram_values_corrected_and_uncorrected():
    gh = build_histograms(two_reps())["g"]
    corrected, uncorrected = gh.merged("ttft_corrected"), gh.merged("ttft_uncorrected")
    assert corrected.get_total_count() == uncorrected.get_total_count() == 3
    # a0: 250 ms from intended, 200 ms from the actual send (50 ms late).
    assert corrected.get_count_at_value(250_000) == 1
    assert uncorrected.get_count_at_value(200_000) == 1
    assert uncorrected.get_count_at_value(400_000) == 1
    assert uncorrected.get_count_at_value(300_000) == 1
    assert gh.merged("itl_chunk").get_total_count() == 12
    assert gh.merged("itl_token").get_count_at_value(100_000) == 12
    assert gh.out_of_range == {}


def test_hlog_round_trip_and_merge_across_runs(tmp_path: Path):
    groups = build_histograms(two_reps())
    names = write_hlogs(tmp_path / "hist", groups)
    assert names == [hlog_name("g", m) for m in HIST_METRICS]
    path = tmp_path / "hist" / hlog_name("g", "ttft_uncorrected")
    text = path.read_text()
    assert text.startswith("#[Histogram log format version 1.2]")
    intervals = read_hlog(path)
    assert [h.get_total_count() for h in intervals] == [2, 1]
    # Interval stamps are the reps' spans on the run clock (ms).
    assert intervals[0].get_start_time_stamp() == 0.0
    assert intervals[1].get_start_time_stamp() == 10_000.0
    assert intervals[1].get_end_time_stamp() == 10_701.0
    merged = merge_hlogs([path, path])  # e.g. the same metric of two runs
    assert merged.get_total_count() == 6
    assert merged.get_count_at_value(400_000) == 2


def test_rewriting_hist_replaces_old_logs(tmp_path: Path):
    hist = tmp_path / "hist"
    hist.mkdir()
    (hist / "stale.ttft_corrected.hlog").write_text("#old\n")
    write_hlogs(hist, build_histograms(two_reps()))
    assert not (hist / "stale.ttft_corrected.hlog").exists()


def test_out_of_range_values_are_counted_not_dropped_silently():
    over_an_hour = stream("slow", chunks=[7200.0, 7200.1])
    negative = stream("skew", sent=1.0, chunks=[0.5, 0.6])  # clock skew: first before send
    gh = build_histograms([over_an_hour, negative, *two_reps()])["g"]
    # Each stream's TTFT and e2e, from intended and from actual send (both 1.0 s for "skew").
    assert gh.out_of_range == {
        "ttft_corrected": 2,
        "ttft_uncorrected": 2,
        "e2e_corrected": 2,
        "e2e_uncorrected": 2,
    }
    assert gh.merged("ttft_uncorrected").get_total_count() == 3


def test_percentile_curve():
    gh = build_histograms(two_reps())["g"]
    curve = dict(percentile_curve(gh.merged("ttft_uncorrected"), [0, 50, 100]))
    h = gh.merged("ttft_uncorrected")
    assert h.values_are_equivalent(curve[0], 200_000)
    assert h.values_are_equivalent(curve[50], 300_000)
    assert h.values_are_equivalent(curve[100], 400_000)
