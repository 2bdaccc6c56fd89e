"""A load sweep's figures (analysis/load_sweep.py): the Pareto frontier, tokens/s per user,
goodput over all groups and the load row, exact values on hand-made records."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from loadgen.analysis import rates
from loadgen.analysis.goodput import Goodput, GroupGoodput
from loadgen.analysis.load_sweep import (
    LOAD_ROW_FIELDS,
    PARETO_MIN_GAIN,
    LoadBlock,
    load_axis,
    load_block,
    load_row,
    pareto_front,
    pooled_goodput,
    tok_s_per_user,
)
from loadgen.analysis.streams import stream_metrics
from loadgen.analysis.summary import analyze_run
from loadgen.codec import to_json
from loadgen.records import StreamError

from support.run_fixtures import failed, manifest, stream, write_run


def test_the_frontier_keeps_the_arms_no_other_beats_on_both() -> None:
    points = {
        "c1": (100.0, 400.0),
        "c2": (90.0, 700.0),
        "c4": (80.0, 650.0),  # c2 has more of both
        "c8": (60.0, 900.0),
        "c16": (60.0, 850.0),  # equal per user to c8, less in total: dominated
        "c32": (None, 2000.0),  # no per-user rate: never on it, dominates nothing
    }
    assert pareto_front(points) == ["c1", "c2", "c8"]
    # Equal points do not dominate each other; one point beating both on both leaves it alone.
    assert pareto_front({"a": (5.0, 5.0), "b": (5.0, 5.0)}) == ["a", "b"]
    assert pareto_front({"a": (1.0, 1.0), "b": (2.0, 2.0), "c": (1.0, 2.0)}) == ["b"]
    assert pareto_front({}) == []


def test_a_gain_within_noise_earns_no_mark() -> None:
    # c8's only edge over c4 is 0.07% more output tok/s, for 7% less per user: off the front.
    within = {"c4": (140.0, 122.0), "c8": (130.0, 122.0854)}
    assert pareto_front(within) == ["c4"]
    # The same trade with a gain past the noise (2% more output) keeps both on it.
    beyond = {"c4": (140.0, 122.0), "c8": (130.0, 124.44)}
    assert pareto_front(beyond) == ["c4", "c8"]
    # An edge within the noise on one axis does not shield an arm the other beats past it on
    # the other: c2 is 0.5% faster per user than c4, which delivers 10% more in all.
    assert pareto_front({"c2": (100.5, 100.0), "c4": (100.0, 110.0)}) == ["c4"]
    # Arms within the noise of each other on both axes cannot be told apart: both keep it.
    assert pareto_front({"a": (100.0, 100.0), "b": (100.5, 100.5)}) == ["a", "b"]
    # Where the sweep's noise is stated as none, the smallest gain counts.
    assert pareto_front(within, gain=0.0) == ["c4", "c8"]


def _rows() -> list[dict]:
    a = stream("a", chunks=[0.1, 0.2, 0.3], tokens=[1, 2, 1])  # 3 decode tokens / 0.2 s = 15
    b = stream("b", chunks=[0.5, 0.6], completion=3)  # 2 / 0.1 s = 20
    c = stream("c", chunks=[0.0, 1.0], completion=11)  # 10 / 1 s = 10
    warm = stream("w", chunks=[0.0, 0.001], completion=2, phase="warmup")  # 1000, not measured
    cut = dataclasses.replace(
        stream("x", chunks=[0.0, 0.002], completion=3), status="error",
        error=StreamError("idle_timeout", "no data"),
    )  # fmt: skip
    return [stream_metrics(r) for r in (a, b, c, warm, cut)] + [
        stream_metrics(failed("f", sent=0.0, done=0.1))
    ]


def test_tokens_per_user_is_the_median_decode_only_rate_of_the_ok_measured_streams() -> None:
    rows = _rows()
    assert tok_s_per_user(rows) == pytest.approx(15.0)
    # The median stream's rate is 1/TPOT, the definition the report states.
    a = stream("a", chunks=[0.1, 0.2, 0.3], tokens=[1, 2, 1])
    assert tok_s_per_user(rows) == pytest.approx(1 / rates.tpot_s(a))
    # The warmup (1000 tok/s) and the cut stream (1000 tok/s) would lift it: they are left out.
    everyone = [r | {"phase": "measure", "status": "ok"} for r in rows]
    assert tok_s_per_user(everyone) == pytest.approx(20.0)  # median of 10, 15, 20, 1000, 1000
    assert tok_s_per_user([]) is None


def test_goodput_over_all_groups_shares_the_benchmark_span() -> None:
    groups = {"g": GroupGoodput(4, 4, 3, 1.0), "h": GroupGoodput(4, 4, 1, 1.0)}
    block = Goodput({"ttft_s": 1.0}, groups)
    assert pooled_goodput(block, 2.0) == {"good": 4, "goodput_req_s": 2.0, "attainment": 0.5}
    assert pooled_goodput(block, None) == {"good": 4, "goodput_req_s": None, "attainment": 0.5}
    assert pooled_goodput(None, 2.0) == {"good": None, "goodput_req_s": None, "attainment": None}


def test_an_arms_load_row_reads_its_benchmark_total_goodput_and_streams(tmp_path: Path) -> None:
    # TTFT 100 and 150 ms; TPOT 200 ms / 3 tokens and 150 ms / 2; E2E 301 and 400 ms.
    a = stream("a", chunks=[0.1, 0.2, 0.3], tokens=[1, 2, 1], sent=0.0)
    b = stream("b", chunks=[0.65, 0.8], sent=0.5, completion=3, done=0.9)
    records = [a, b, failed("c", sent=0.2, done=0.4, group="h")]
    run = write_run(tmp_path / "run", records, run=manifest(slo={"ttft_s": 0.12}))
    row = to_json(load_row(analyze_run(run).summary))
    assert list(row) == list(LOAD_ROW_FIELDS)
    assert row == pytest.approx({
        "requests_ok": 2, "requests_failed": 1, "request_per_s": 2 / 0.9,
        "output_tok_s": 7 / 0.9, "output_token_source": "usage_continuous",
        "ttft_median_ms": 125.0, "ttft_p90_ms": 145.0,
        "tpot_median_ms": 70.8333333, "tpot_p90_ms": 74.1666667,
        "e2e_median_ms": 350.5, "e2e_p90_ms": 390.1,
        # only a meets TTFT <= 120 ms: 1 good of 3 requests (c failed) over the 0.9 s span
        "good": 1, "goodput_req_s": 1 / 0.9, "attainment": 1 / 3,
        "tok_s_per_user": (15.0 + 2 / 0.15) / 2,
    })  # fmt: skip


def _arm(settings: dict, flags: dict | None = None, per_user: float = 1.0, total: float = 1.0):
    row = {**dict.fromkeys(LOAD_ROW_FIELDS), "requests_ok": 1, "requests_failed": 0,
           "tok_s_per_user": per_user, "output_tok_s": total}  # fmt: skip
    return {"settings": settings, "flags": flags or {}, "load_row": row}


def test_only_a_sweep_whose_one_setting_is_a_load_is_a_load_sweep() -> None:
    assert load_axis({"c=1": _arm({"concurrency": 1}), "c=2": _arm({"concurrency": 2})}) == (
        "concurrency"
    )
    assert load_axis({"r=1": _arm({"rate": 1.0}), "r=inf": _arm({"rate": "inf"})}) == "rate"
    ladder = {"n=1": _arm({"groups.streams.count": 1}), "n=2": _arm({"groups.streams.count": 2})}
    assert load_axis(ladder) is None
    flagged = {"a": _arm({"concurrency": 1}, {"max_num_seqs": 4})}
    assert load_axis(flagged) is None
    mixed = {"a": _arm({"concurrency": 1}), "b": _arm({"rate": 2.0})}
    assert load_axis(mixed) is None
    assert load_axis({"a": _arm({"concurrency": 1, "rate": 2.0})}) is None
    assert load_axis({}) is None


def test_the_load_block_lists_values_in_arm_order_and_the_frontier() -> None:
    arms = {
        "rate=inf": _arm({"rate": "inf"}, per_user=40.0, total=900.0),
        "rate=1": _arm({"rate": 1.0}, per_user=100.0, total=100.0),
        "rate=2": _arm({"rate": 2.0}, per_user=100.0, total=200.0),
    }
    block = load_block(arms, ["rate=1", "rate=2", "rate=inf"], {"ttft_s": 2.0})
    assert block == LoadBlock(
        axis="rate",
        arms=("rate=1", "rate=2", "rate=inf"),
        values=(1.0, 2.0, "inf"),
        pareto=("rate=2", "rate=inf"),  # rate=1: rate=2 has as much per user, more in all
        pareto_axes=("tok_s_per_user", "output_tok_s"),
        slo={"ttft_s": 2.0},
        pareto_min_gain=PARETO_MIN_GAIN,
    )
    assert load_block({"n=1": _arm({"groups.g.count": 1})}, ["n=1"], None) is None
