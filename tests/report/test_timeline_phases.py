"""The stream timeline's phases (report/plots.py) on the virtual clock: queueing, whether for a
seat or behind another request's prefill, is drawn as queued, never as the stream's prefill."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.analysis.summary_types import read_stream_rows
from loadgen.report.plots import _segments, timeline_legend_kinds

from support.paths import DATA
from support.virtual import run_virtual

UNIFORM = DATA / "scenarios" / "verdict_uniform.yaml"
NS = 1_000_000_000


async def test_whale_c4_minnows_queue_behind_the_whale_prefill(tmp_path: Path):
    run = await run_virtual("whale_c4", [], tmp_path, seed=74)
    rows = {s.id: _segments(s) for s in read_stream_rows(run.summary)}
    # The whale held a seat from its send: all prefill, then decode.
    assert rows["default/r0/whale/0"] == [
        ("prefill", 0.0, 6.5558776),
        ("decode", 6.5558776, 8.36876549),
    ]
    # Each minnow: queued from its send until its verdict's prefill_hol phase ends (first
    # token minus its normal prefill of 0.370 s), then its own prefill, then decode.
    assert rows["default/r0/minnows/0"] == [
        ("queued", 0.5, 6.4171067),
        ("prefill", 6.4171067, 6.78698101),
        ("decode", 6.78698101, 8.37157048),
    ]
    assert rows["default/r0/minnows/1"][:2] == [
        ("queued", 0.5, 6.64857889),
        ("prefill", 6.64857889, 7.0184532),
    ]
    assert rows["default/r0/minnows/2"][:2] == [
        ("queued", 0.5, 6.82128243),
        ("prefill", 6.82128243, 7.19115674),
    ]
    # Within one engine step (<= 0.12 s here) of when the sim really admitted each minnow.
    for rid in ("default/r0/minnows/0", "default/r0/minnows/1", "default/r0/minnows/2"):
        queued_to = rows[rid][0][2]
        assert queued_to == pytest.approx(run.truth[rid]["admitted_ns"][0] / NS, abs=0.12)
    assert timeline_legend_kinds(read_stream_rows(run.summary)) == ["queued", "prefill", "decode"]


async def test_seat_cap_queue_ends_at_the_modelled_admission(tmp_path: Path):
    run = await run_virtual(UNIFORM, ["sim.max_num_seqs=2"], tmp_path, seed=3)
    rows = {s.id: _segments(s) for s in read_stream_rows(run.summary)}
    # The first stream was seated and served at once: nothing queued.
    assert [k for k, _, _ in rows["default/r0/streams/0"]] == ["prefill", "decode"]
    # The third waited for a seat: queued until the first stream finished, as the sim says.
    assert rows["default/r0/streams/2"][:2] == [
        ("queued", 0.0, 0.340076556),
        ("prefill", 0.340076556, 0.42063816),
    ]
    assert run.truth["default/r0/streams/2"]["admitted_ns"] == [340076556]
