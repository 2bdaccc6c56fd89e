"""The sweep figure: each metric against the swept flag, one point per boot."""

from __future__ import annotations

import base64
from pathlib import Path

from loadgen.analysis.summary_types import MinMax
from loadgen.analysis.sweep import analyze_sweep
from loadgen.analysis.sweep_types import MixedRow, SweepSummary, read_sweep
from loadgen.codec import to_json
from loadgen.report.cmd import write_report
from loadgen.report.html import render_sweep_html
from loadgen.report.sweep_plot import (
    SWEEP_PNG,
    SweepPoint,
    sweep_figure,
    sweep_png,
    sweep_points,
    swept_axis,
)

from support.paths import DATA
from support.run_fixtures import sweep_arm
from support.virtual import run_virtual

PNG = b"\x89PNG\r\n\x1a\n"


def row(during: tuple[float, float, float] | None, whale: float) -> dict:
    lo, mid, hi = during or (None, None, None)
    none = MinMax(None, None, None, 0)
    minnows = MinMax(lo, mid, hi, 3)
    return to_json(MixedRow(whale, none, minnows, none, 0, None))


def sweep(arms: dict) -> SweepSummary:
    return read_sweep({"arms": {name: sweep_arm(**arm) for name, arm in arms.items()}})


def test_points_are_one_per_arm_with_the_minnows_range() -> None:
    s = sweep(
        {
            "b512": {"flags": {"max_num_batched_tokens": 512}, "row": row((19, 20, 23), 7.0)},
            "b2048": {"flags": {"max_num_batched_tokens": 2048}, "row": row((5, 5.5, 6), 6.7)},
            "cold": {"flags": {"max_num_batched_tokens": 4096}},  # no whale: nothing to draw
        }
    )
    assert swept_axis(s) == "max_num_batched_tokens"
    points = sweep_points(s, "max_num_batched_tokens")
    assert [(p.arm, p.boot, p.x) for p in points] == [("b512", 0, 512.0), ("b2048", 0, 2048.0)]
    assert points[0].values["minnow_decode_during_tok_s"] == 20
    assert points[0].ranges["minnow_decode_during_tok_s"] == (19, 23)
    assert "minnow_ttft_s" not in points[0].ranges  # no minnow TTFT: no range
    assert points[1].values["whale_ttft_s"] == 6.7
    png = sweep_png(points, "max_num_batched_tokens")
    assert png is not None and png.startswith(PNG)
    assert sweep_png(points, "max_num_batched_tokens") == png  # same points, same bytes


def test_no_figure_without_one_numeric_swept_axis_or_without_rows() -> None:
    two_axes = {
        "a": {"flags": {"max_num_seqs": 2, "max_num_batched_tokens": 512}, "row": row(None, 1)},
        "b": {"flags": {"max_num_seqs": 4, "max_num_batched_tokens": 1024}, "row": row(None, 1)},
    }
    assert swept_axis(sweep(two_axes)) is None
    summary = {"arms": {name: sweep_arm(**arm) for name, arm in two_axes.items()}}
    assert sweep_figure(read_sweep(summary)) is None
    assert swept_axis(sweep({"a": {"flags": {"kv_cache_dtype": "fp8"}},
                             "b": {"flags": {"kv_cache_dtype": "auto"}}})) is None  # fmt: skip
    empty = [SweepPoint("a", 0, 1.0, {"whale_ttft_s": None}, {})]
    assert sweep_png(empty, "x") is None


async def test_a_ten_arm_politeness_sweep_on_the_virtual_clock_draws_the_budget_figure(
    tmp_path: Path,
) -> None:
    run = await run_virtual("politeness_fine", [], tmp_path)
    summary, arms = analyze_sweep(run.run_dir)
    assert len(arms) == 10 and len(run.sims) == 10
    budgets = [summary["arms"][a]["flags"]["max_num_batched_tokens"] for a in summary["arm_order"]]
    assert budgets == [256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 8192]
    during = [summary["arms"][a]["row"]["minnow_decode_during_tok_s"]["median"]
              for a in summary["arm_order"]]  # fmt: skip
    whale = [summary["arms"][a]["row"]["whale_ttft_s"] for a in summary["arm_order"]]
    # A smaller budget: shorter whale chunks, so faster minnows while it prefills, and a whale
    # that waits a little longer for its own first token.
    assert during == sorted(during, reverse=True) and during[0] > 20 * during[-1]
    assert whale == sorted(whale, reverse=True)
    png = sweep_figure(read_sweep(summary))
    assert png is not None and png.startswith(PNG)
    # Per-arm reports are left out here only to keep the test short (their plots are slow).
    html = render_sweep_html(read_sweep(summary), {}, png)
    assert "Across the sweep" in html and base64.b64encode(png).decode() in html


async def test_write_report_puts_the_sweep_figure_beside_the_report(tmp_path: Path) -> None:
    scenario = DATA / "scenarios" / "verdict_whale.yaml"
    sets = ["sim.profile=default", "groups.whale.start=0.1",
            "sweep.max_num_batched_tokens=[512, 2048]"]  # fmt: skip
    run = await run_virtual(scenario, sets, tmp_path)
    write_report(run.run_dir)
    png = (run.run_dir / SWEEP_PNG).read_bytes()
    assert png == sweep_figure(read_sweep(analyze_sweep(run.run_dir)[0]))
    assert base64.b64encode(png).decode() in (run.run_dir / "report.html").read_text()
