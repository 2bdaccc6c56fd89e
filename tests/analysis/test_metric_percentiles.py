"""`--metric-percentiles`: TTFT, TPOT, ITL and E2E at any percentiles, read from the HDR
histograms into summary.json (per group and in total) and the report; not asked, nothing
changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from loadgen.analysis.hist import merge_hlogs
from loadgen.analysis.inputs import RunInputs, read_manifest
from loadgen.analysis.summary import analyze
from loadgen.cli import main

from support.run_fixtures import manifest, stream, ticks

ASKED = [50.0, 95.0, 99.9]


def _streams() -> list:
    """200 streams a group, TTFT 5, 10, ..., 1000 ms, then three chunks 10 ms apart."""
    return [
        stream(f"s{i}", group=group, sent=2.0 * i, chunks=ticks(2.0 * i + 0.005 * i, 3, 0.01))
        for i in range(1, 201)
        for group in ("a", "b")
    ]


def test_percentiles_are_the_histograms_values_exactly() -> None:
    summary = analyze(RunInputs(manifest(metric_percentiles=ASKED), _streams(), [])).summary
    # 3 significant digits: values in [1024 * 2^k, 2048 * 2^k) us share buckets 2^k us wide,
    # and a value reads as the top of its bucket. TTFT p50 is rank 100 of 200 (hdrh: int(p/100
    # * n + 0.5)), 500 ms = 500,000 us, in a 256 us bucket from 499,968: top 500,223. p95 is
    # rank 190, 950 ms (512 us from 949,760: top 950,271); p99.9 rank 200, 1000 ms (from
    # 999,936: top 1,000,447). E2E adds 21 ms (20 ms of decode, the end 1 ms after the last
    # chunk): 521, 971, 1021 ms, tops 521,215, 971,263 and 1,021,439 us. Every ITL and TPOT is
    # 10 ms = 10,000 us, in an 8 us bucket: top 10,007.
    want = {
        "ttft_ms": {"p50": 500.223, "p95": 950.271, "p99.9": 1000.447},
        "tpot_ms": {"p50": 10.007, "p95": 10.007, "p99.9": 10.007},
        "itl_ms": {"p50": 10.007, "p95": 10.007, "p99.9": 10.007},
        "e2e_ms": {"p50": 521.215, "p95": 971.263, "p99.9": 1021.439},
    }
    assert summary["groups"]["a"]["percentiles"] == want
    assert summary["groups"]["b"]["percentiles"] == want
    # Both groups alike: the total's ranks double, the values stay.
    assert summary["percentiles"] == {"asked": ASKED, "total": want}


def test_not_asked_the_summary_has_no_percentiles() -> None:
    summary = analyze(RunInputs(manifest(), _streams(), [])).summary
    assert "percentiles" not in summary
    assert all("percentiles" not in g for g in summary["groups"].values())


def test_a_run_reports_the_percentiles_asked_from_its_own_hlogs(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, [
        "run", "smoke", "--clock", "virtual", "--seed", "3", "--no-progress", "--out",
        str(tmp_path), "--metric-percentiles", "50,95,99.9",
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    (run_dir,) = tmp_path.iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert read_manifest(run_dir).metric_percentiles == tuple(ASKED)
    for group in ("long", "short"):
        got = summary["groups"][group]["percentiles"]
        for figure, hist in (("ttft_ms", "ttft_uncorrected"), ("e2e_ms", "e2e_uncorrected"),
                             ("itl_ms", "itl_token")):  # fmt: skip
            h = merge_hlogs([run_dir / "hist" / f"{group}.{hist}.hlog"])
            want = {f"p{p:g}": h.get_value_at_percentile(p) / 1e3 for p in ASKED}
            assert got[figure] == want, figure
    assert "Percentiles, ms" in res.output and "p99.9" in res.output
    report = (run_dir / "report.txt").read_text()
    assert "Percentiles, ms" in report


def test_a_run_without_the_option_writes_no_percentiles(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["run", "smoke", "--clock", "virtual", "--seed", "3",
                                    "--no-progress", "--out", str(tmp_path)])  # fmt: skip
    assert res.exit_code == 0, res.output
    (run_dir,) = tmp_path.iterdir()
    assert "metric_percentiles" not in json.loads((run_dir / "run.json").read_text())
    assert "percentiles" not in json.loads((run_dir / "summary.json").read_text())
    assert "Percentiles, ms" not in res.output


def test_percentile_0_is_the_least_value() -> None:
    # bench takes 0 (numpy's least): hdrh reads rank 0 as the least value recorded, TTFT 5 ms
    # and E2E 26 ms here (5,000 and 26,000 us, each at the bottom of its bucket).
    summary = analyze(RunInputs(manifest(metric_percentiles=[0.0]), _streams(), [])).summary
    got = summary["groups"]["a"]["percentiles"]
    assert (got["ttft_ms"], got["e2e_ms"]) == ({"p0": 5.0}, {"p0": 26.0})


@pytest.mark.parametrize("value", ["-1,50", "50,101", "p50", ""])
def test_bad_percentiles_are_refused_in_one_line(tmp_path: Path, value: str) -> None:
    res = CliRunner().invoke(main, ["run", "smoke", "--clock", "virtual", "--out", str(tmp_path),
                                    "--metric-percentiles", value])  # fmt: skip
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert "--metric-percentiles" in res.output and "numbers in [0, 100]" in res.output
