"""The metric registry: each stream metric declared once feeds the summary's stream rows, the
group and rep statistics, the histograms, the SLO items, the fidelity table and the report's
stream columns; a new entry reaches every place it is flagged for."""

from __future__ import annotations

import pytest

from loadgen.analysis import registry, streams
from loadgen.analysis.fidelity import fidelity_table
from loadgen.analysis.goodput import SLO_FIELDS
from loadgen.analysis.hist import HIST_METRICS, build_histograms
from loadgen.analysis.inputs import RunInputs
from loadgen.analysis.registry import GAP_METRICS, STREAM_METRICS, Metric, metric, names_where
from loadgen.analysis.slo import METRICS as CAPACITY_METRICS
from loadgen.analysis.slo import parse_slo
from loadgen.analysis.streams import stream_metrics
from loadgen.analysis.summary import analyze
from loadgen.report.html import STREAM_COLUMNS
from loadgen.scenario import schema_blocks

from support.run_fixtures import manifest, stream, ticks


def one_stream():
    # Intended at 0, sent 50 ms late, first chunk at 0.25 s, then 4 more 100 ms apart carrying
    # 1, 2, 1, 2, 2 tokens (8 in all).
    return stream("a", intended=0.0, sent=0.05, chunks=ticks(0.25, 5, 0.1), tokens=[1, 2, 1, 2, 2])


def test_every_registered_metric_is_a_stream_row_field_with_its_functions_value():
    rec = one_stream()
    row = stream_metrics(rec)
    for m in STREAM_METRICS:
        assert row[m.name] == m.of(rec), m.name
    assert row["ttft_s"] == pytest.approx(0.2)
    assert row["ttft_intended_s"] == pytest.approx(0.25)
    assert row["late_s"] == pytest.approx(0.05)
    assert row["tokens_per_chunk"] == pytest.approx(8 / 5)
    # Decode-only: 7 tokens after the first chunk over 0.4 s.
    assert row["decode_tok_s"] == pytest.approx(17.5)
    for g in GAP_METRICS:
        assert row[g.name]["n"] == (4 if g.name == "itl_chunk_ms" else 7)


def test_group_and_rep_statistics_are_the_flagged_metrics_and_no_others():
    summary = analyze(RunInputs(manifest(), [one_stream()], [])).summary
    group, rep = summary["groups"]["g"], summary["reps"][0]
    described = set(names_where("group_stats"))
    assert {"ttft_s", "e2e_s", "tpot_s", "prompt_tokens", "late_s"} <= described
    for m in STREAM_METRICS:
        assert (m.name in group) == (m.name in described), m.name
        assert (m.name in rep) == m.rep_stats, m.name
    assert set(group["rep_medians"]) == set(names_where("rep_medians"))
    assert group["ttft_s"]["median"] == pytest.approx(0.2)
    assert group["prompt_tokens"]["median"] == 1000
    assert group["itl_chunk_ms"]["median"] == pytest.approx(100.0)


def test_histograms_are_the_registry_s_in_its_order_with_values_in_us():
    assert list(HIST_METRICS) == [
        "ttft_corrected", "ttft_uncorrected", "e2e_corrected", "e2e_uncorrected",
        "itl_token", "itl_chunk",
    ]  # fmt: skip
    gh = build_histograms([one_stream()])["g"]
    assert gh.merged("ttft_corrected").get_count_at_value(250_000) == 1
    assert gh.merged("ttft_uncorrected").get_count_at_value(200_000) == 1
    # Token gaps spread a 2-token chunk's 100 ms over its two tokens: 4 x 50 ms + 1 x 100 ms.
    assert gh.merged("itl_token").get_count_at_value(50_000) == 6
    assert gh.merged("itl_chunk").get_count_at_value(100_000) == 4


def test_slo_fields_come_from_the_registry_and_match_the_scenario_schema():
    assert SLO_FIELDS == {"ttft_s": ("ttft_s", 1.0), "e2e_s": ("e2e_s", 1.0),
                          "tpot_ms": ("tpot_s", 1e-3)}  # fmt: skip
    assert CAPACITY_METRICS == {"ttft": ("ttft_s", 1.0, "s"), "e2e": ("e2e_s", 1.0, "s"),
                                "tpot": ("tpot_s", 1e-3, "ms")}  # fmt: skip
    assert {i.key: i.limit for i in parse_slo("ttft=2,tpot=50,e2e=9")} == {
        "ttft_s": 2.0, "tpot_ms": 50.0, "e2e_s": 9.0,
    }  # fmt: skip
    # The scenario layer sits below analysis and names the keys itself: held to the registry.
    assert set(schema_blocks.SLO_KEYS) == set(SLO_FIELDS)


def test_report_columns_and_fidelity_labels_are_the_registry_s():
    headers = {field: header for field, header, _ in STREAM_COLUMNS}
    assert headers["ttft_s"] == metric("ttft_s").column == "TTFT s"
    assert headers["decode_tok_s"] == "decode tok/s"
    fmt = {field: f for field, _, f in STREAM_COLUMNS}
    assert fmt["ttft_s"](0.2) == "0.200" and fmt["decode_tok_s"](17.5) == "17.5"
    group = {"ttft_s": {"median": 1.0, "p90": 2.0}, "decode_tok_s": {"median": 10.0}}
    real = {"groups": {"g": group}, "run": {"reps_wall_s": 5.0}}
    labels = {(r.metric, r.label, r.unit) for r in fidelity_table({"-": real}, {"-": real}).rows}
    assert labels == {
        ("ttft_median_s", "TTFT median", "s"),
        ("ttft_p90_s", "TTFT p90", "s"),
        ("decode_median_tok_s", "decode-only rate median", "tok/s"),
        ("reps_wall_s", "wall (reps summed)", "s"),
    }


def test_a_new_entry_reaches_stream_rows_and_group_statistics(monkeypatch):
    extra = Metric("chunk_count_sq", "chunks squared", "chunks", lambda r: r.chunks**2, "c^2",
                   group_stats=True)  # fmt: skip
    monkeypatch.setattr(streams, "STREAM_METRICS", (*STREAM_METRICS, extra))
    monkeypatch.setattr(registry, "STREAM_METRICS", (*STREAM_METRICS, extra))
    summary = analyze(RunInputs(manifest(), [one_stream()], [])).summary
    assert summary["streams"][0]["chunk_count_sq"] == 25
    assert summary["groups"]["g"]["chunk_count_sq"]["median"] == 25


def test_unknown_metric_is_a_key_error():
    with pytest.raises(KeyError):
        metric("ttft_ms")
