"""The calibration's pure half (analysis/calibration.py and calibration_fit.py): exact design
rows, measurements from hand-built records, the speculation estimate, and a fit that recovers
known costs and names the points a wrong model misses."""

import dataclasses

import pytest

from loadgen.analysis.calibration import (
    COSTS,
    Measurement,
    Point,
    ServerShape,
    TtftWitness,
    calibration_plan,
    decode_row,
    measure,
    prefill_row,
    prefill_steps,
    read_witnesses,
    speculation,
    speculation_from_counters,
    ttft_witness,
)
from loadgen.analysis.calibration_fit import FitRow, FitSummary, fit_costs
from loadgen.codec import from_json, to_json
from loadgen.records import StreamRecord
from loadgen.report.calibration_report import witness_line

MS = 1_000_000
SHAPE = ServerShape(budget=2048, seats=4, block_size=16, max_model_len=131072)
KNOWN = {
    "request_overhead_s": 0.0004, "fixed_s": 0.0011, "per_token_s": 5.2e-5,
    "decode_token_s": 1.2e-5, "decode_ctx_s": 3.5e-8, "prefill_ctx_s": 1e-9,
    "cached_token_s": 5.2e-6,
}  # fmt: skip


def record(**kw) -> StreamRecord:
    base = dict(
        id="s0", group="probe", rep=0, status="ok", error=None, api="completions", model="m",
        prompt_tokens=100, requested_prompt_tokens=100, completion_tokens=5, cached_tokens=None,
        chunks=5, events=7, bytes=100, token_source="usage_continuous", finish_reason="length",
        http_status=200, t_intended_ns=0, t_sent_ns=0, t_headers_ns=1 * MS, t_first_ns=10 * MS,
        t_last_ns=14 * MS, t_done_ns=14 * MS,
        chunk_ns=[10 * MS, 11 * MS, 12 * MS, 13 * MS, 14 * MS], chunk_tokens=[1, 1, 1, 1, 1],
    )  # fmt: skip
    base.update(kw)
    return StreamRecord(**base)


def test_a_prefill_row_counts_every_chunk_of_the_budget() -> None:
    # 5000 tokens at a 2048 budget: chunks 2048, 2048, 904; the attention work sums to N^2/2.
    row = prefill_row(SHAPE, 5000, 0)
    assert row["fixed_s"] == 3
    assert row["per_token_s"] == 5000
    assert row["prefill_ctx_s"] == 5000 * 5000 / 2
    assert row["request_overhead_s"] == 1
    assert row["cached_token_s"] == 0 and row["decode_token_s"] == 0


def test_a_cached_prefix_is_restored_once_and_its_tail_attends_to_it() -> None:
    row = prefill_row(SHAPE, 40, 8192)
    assert row["fixed_s"] == 1
    assert row["per_token_s"] == 40
    assert row["prefill_ctx_s"] == 40 * (8192 + 20)
    assert row["cached_token_s"] == 8192


def test_a_decode_row_prices_drafts_as_decode_tokens() -> None:
    row = decode_row(ServerShape(2048, 8, 16, 4096, spec_tokens=3), batch=4, context=300.0)
    assert (row["fixed_s"], row["decode_token_s"], row["decode_ctx_s"]) == (1.0, 16.0, 1200.0)
    assert row["per_token_s"] == 0 and row["request_overhead_s"] == 0


def test_the_plan_spans_budget_window_and_seats() -> None:
    names = [p.name for p in calibration_plan(SHAPE)]
    assert names == [
        "tiny", "prefill-1024", "prefill-2048", "prefill-4096", "prefill-8192",
        "prefill-16384", "prefill-32768", "prefill-65536", "cached-2048", "cached-8192",
        "cached-32768", "cached-65504", "decode-b1", "decode-b2", "decode-b4",
        "decode-ctx32768", "decode-ctx65472",
    ]  # fmt: skip
    # A small window caps every prompt; no prefix cache: no cached point.
    small = calibration_plan(ServerShape(512, 2, 32, 2048, prefix_caching=False))
    assert max(p.prompt_tokens for p in small) <= 2048 - 64 - 1
    assert not [p for p in small if p.kind == "cached"]
    assert [p.streams for p in small if p.name.startswith("decode-b")] == [1, 2]


def test_a_ttft_point_measures_the_median_and_the_reported_cache_hit() -> None:
    point = Point("cached-4096", "cached", 4128, 1, prefix_tokens=4096)
    recs = [
        record(id=f"s{i}", t_first_ns=t * MS, prompt_tokens=4128, cached_tokens=4096)
        for i, t in enumerate((30, 10, 20))
    ]
    m = measure(point, recs, SHAPE)
    assert m is not None
    assert m.value_s == pytest.approx(0.020)
    assert m.basis == {"prompt_tokens": 4128, "cached_tokens": 4096}
    assert m.row["per_token_s"] == 32 and m.row["cached_token_s"] == 4096
    # Unreported, the hit is the prefix's whole blocks.
    unreported = measure(point, [record(prompt_tokens=4128, cached_tokens=None)], SHAPE)
    assert unreported is not None and unreported.basis["cached_tokens"] == 4096


def test_a_decode_point_keeps_the_gaps_while_every_stream_decoded() -> None:
    # Stream b starts 2 ms late; the window is [12, 14] ms: gaps 13-12 and 14-13 of a and b.
    a = record(id="a", chunk_ns=[10 * MS, 11 * MS, 12 * MS, 13 * MS, 14 * MS, 20 * MS],
               chunk_tokens=[1] * 6, completion_tokens=6)  # fmt: skip
    b = record(id="b", chunk_ns=[12 * MS, 13 * MS, 14 * MS, 15 * MS], chunk_tokens=[1] * 4,
               completion_tokens=4)  # fmt: skip
    point = Point("decode-b2", "decode", 100, 6, streams=2)
    m = measure(point, [a, b], ServerShape(2048, 2, 16, 4096))
    assert m is not None
    # Too few window gaps (4 < 4 x 2): every gap after the last first token (12 ms) counts:
    # a: 1, 1, 6 ms; b: 1, 1, 1 ms; their mean (11 / 6 ms) is the step.
    assert m.samples == 6
    assert m.value_s == pytest.approx(0.011 / 6)
    assert m.row["decode_token_s"] == 2


def test_streams_that_never_decoded_together_measure_no_batch() -> None:
    # Two streams one after the other (a server of one seat under a decode-b2): their gaps are
    # batch 1's, and were fitted as batch 2's.
    a = record(id="a", chunk_ns=[10 * MS, 11 * MS, 12 * MS, 13 * MS, 14 * MS])
    b = record(id="b", chunk_ns=[15 * MS, 16 * MS, 17 * MS, 18 * MS, 19 * MS])
    point = Point("decode-b2", "decode", 100, 5, streams=2)
    assert measure(point, [a, b], ServerShape(2048, 1, 16, 4096)) is None
    # One instant together (b's first chunk inside a's decode) is a window.
    b = record(id="b", chunk_ns=[13 * MS, 14 * MS, 15 * MS, 16 * MS, 17 * MS])
    assert measure(point, [a, b], ServerShape(2048, 2, 16, 4096)) is not None


def test_a_failed_stream_leaves_its_rep_out_of_a_decode_probe() -> None:
    point = Point("decode-b2", "decode", 100, 5, streams=2)
    ok = record(id="a")
    bad = record(id="b", status="error", t_first_ns=None, chunk_ns=[], chunk_tokens=None)
    assert measure(point, [ok, bad], SHAPE) is None


def test_speculation_is_read_from_tokens_per_chunk() -> None:
    # k = 3 (largest chunk 4); mean of the middle chunks 1.875 = 1 + a + a^2 + a^3 at a = 0.5.
    sizes = [1, 4, 2, 1, 1, 4, 2, 1, 3, 4]
    spec = speculation([record(chunk_tokens=sizes, chunk_ns=list(range(len(sizes))))])
    middle = sizes[1:-1]
    assert spec.tokens == 3
    assert 1 + spec.acceptance + spec.acceptance**2 + spec.acceptance**3 == pytest.approx(
        sum(middle) / len(middle), abs=1e-3
    )
    assert speculation([record()]).tokens == 0
    # One coalesced pair in 200 chunks is a late write, not a draft.
    rare = [1] * 100 + [2] + [1] * 100
    assert speculation([record(chunk_tokens=rare, chunk_ns=list(range(len(rare))))]).tokens == 0
    assert speculation([record(chunk_tokens=None)]).source.startswith("no per-chunk")


def test_the_servers_spec_counters_outrank_the_chunks() -> None:
    # 100 drafts of 3 tokens, 117.6 accepted: 1.176 per draft = a + a^2 + a^3 at a = 0.6.
    deltas = {"spec_decode_num_drafts_total": 100.0, "spec_decode_num_draft_tokens_total": 300.0,
              "spec_decode_num_accepted_tokens_total": 117.6}  # fmt: skip
    spec = speculation_from_counters(deltas)
    assert spec is not None
    assert spec.tokens == 3 and spec.acceptance == pytest.approx(0.6, abs=1e-3)
    assert spec.source.startswith("server counters")
    assert speculation_from_counters({**deltas, "spec_decode_num_drafts_total": 0.0}) is None
    assert speculation_from_counters({}) is None


def test_the_servers_ttft_histogram_stands_beside_the_clients_timing() -> None:
    point = Point("prefill-1024", "ttft", 1024, 1)
    recs = [record(id=f"s{i}", t_first_ns=t * MS) for i, t in enumerate((10, 20, 30))]
    hist = {"time_to_first_token_seconds_sum": 0.054, "time_to_first_token_seconds_count": 3.0}
    w = ttft_witness(point, recs, hist)
    assert w is not None
    assert (w.requests, w.server_ttft_s, w.client_ttft_s) == (3, pytest.approx(0.018), 0.02)
    # A histogram that counted other requests than the run's, or none at all: no witness.
    assert ttft_witness(point, recs, {**hist, "time_to_first_token_seconds_count": 4.0}) is None
    assert ttft_witness(point, recs, {}) is None
    # As the profile file holds it (six figures), and read back to the same figures.
    written = {"point": "prefill-1024", "requests": 3, "server_ttft_mean_s": 0.018,
               "client_ttft_mean_s": 0.02}  # fmt: skip
    assert to_json(w) == written and from_json(TtftWitness, written) == w
    # A profile written before points had their name keys the row `probe`: read the same.
    legacy = {("probe" if k == "point" else k): v for k, v in written.items()}
    assert from_json(TtftWitness, legacy) == w
    (back,) = read_witnesses({"server_witness": [to_json(w)]})
    assert witness_line([back], 0.0025, "vllm") == (
        "fit on client timing; vllm's TTFT histogram over the same requests: the client sees "
        "2.000 ms more (median over 1 points), the fitted request overhead is 2.500 ms"
    )
    assert witness_line(read_witnesses({"server_witness": []}), 0.0, "llama.cpp") == (
        "llama.cpp has no TTFT histogram on /metrics: the fit rests on client timing alone"
    )


def _measurements(costs: dict[str, float], bend: float = 0.0) -> list[Measurement]:
    """Measurements the model with `costs` predicts exactly; `bend` adds a term it lacks (a
    cost that grows with the square of the batch) to the decode ones."""
    out = []
    for n in (16, 1024, 2048, 8192, 65536):
        row = prefill_row(SHAPE, n, 0)
        out.append(Measurement(f"prefill-{n}", "ttft", sum(row[c] * costs[c] for c in COSTS),
                               3, row, steps=tuple(prefill_steps(SHAPE, n, 0))))  # fmt: skip
    for cached in (2048, 32768):
        row = prefill_row(SHAPE, 32, cached)
        out.append(Measurement(f"cached-{cached}", "cached",
                               sum(row[c] * costs[c] for c in COSTS), 3, row,
                               steps=tuple(prefill_steps(SHAPE, 32, cached))))  # fmt: skip
    for batch, ctx in ((1, 300), (2, 300), (4, 300), (8, 300), (1, 32768), (1, 65536)):
        row = decode_row(SHAPE, batch, ctx)
        value = sum(row[c] * costs[c] for c in COSTS) + bend * batch * batch
        out.append(Measurement(f"decode-b{batch}-{ctx}", "decode", value, 100, row))
    return out


def test_the_fit_recovers_known_costs() -> None:
    fit = fit_costs(_measurements(KNOWN))
    for name, value in KNOWN.items():
        assert fit.costs[name] == pytest.approx(value, rel=1e-4), name
    assert fit.summary().max_error < 1e-4
    assert fit.summary().misses == ()


def test_the_fit_names_the_probes_a_model_cannot_fit() -> None:
    # A decode cost growing with batch^2 (0.4 ms x B^2): the linear model misses at B = 8.
    fit = fit_costs(_measurements(KNOWN, bend=0.0004))
    summary = fit.summary()
    assert summary.max_error > 0.10
    assert summary.misses == ("decode-b2-300", "decode-b4-300", "decode-b8-300")
    # The prefill points, which the model does fit, stay within 1%.
    assert all(abs(r.error) < 0.01 for r in fit.rows if r.kind != "decode")
    # As the profile file holds them, and read back.
    assert from_json(FitSummary, to_json(summary)) == summary
    assert tuple(from_json(FitRow, to_json(r)) for r in fit.rows) == fit.rows
    # A row's basis is written flat beside its own fields, and read back into the basis.
    row = FitRow("prefill-1024", "ttft", 3, 0.1, 0.11, 0.1, {"prompt_tokens": 1024})
    flat = {"point": "prefill-1024", "kind": "ttft", "samples": 3, "measured_s": 0.1,
            "predicted_s": 0.11, "error": 0.1, "prompt_tokens": 1024}  # fmt: skip
    assert to_json(row) == flat and from_json(FitRow, flat) == row
    legacy = {("probe" if k == "point" else k): v for k, v in flat.items()}
    assert from_json(FitRow, legacy) == row and "probe" not in to_json(row)


def test_a_cost_no_point_measures_is_said_to_be_unmeasured() -> None:
    ms = [m for m in _measurements(KNOWN) if m.kind != "cached"]
    fit = fit_costs(ms)
    assert fit.unmeasured == ("cached_token_s",)
    assert fit.costs["cached_token_s"] == 0


def test_a_floor_under_every_step_is_fitted_where_the_decode_steps_show_one() -> None:
    # An eager-mode GPU: no step under 16 ms (kernel launches), prefill steps well above it.
    gpu = {**KNOWN, "fixed_s": 0.001, "decode_token_s": 2e-4, "decode_ctx_s": 1e-9}
    floor = 0.016
    ms = []
    for m in _measurements(gpu):
        steps = m.steps or (m.row,)
        value = m.row["request_overhead_s"] * gpu["request_overhead_s"] + sum(
            max(floor, sum(s[c] * gpu[c] for c in COSTS if c != "request_overhead_s"))
            for s in steps
        )
        ms.append(dataclasses.replace(m, value_s=value))
    fit = fit_costs(ms)
    assert fit.min_step_s == pytest.approx(floor, rel=0.02)
    assert fit.summary().max_error < 0.02
    # The linear model alone cannot: decode flat at the floor, prefill steps far above it.
    assert fit_costs([m for m in ms if m.kind != "decode"]).min_step_s is None
