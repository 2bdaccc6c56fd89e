"""loadgen compare: differences against the runs' own rep-to-rep spread."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from loadgen.analysis.compare import CompareRow, compare_summaries
from loadgen.analysis.summary import analyze_run
from loadgen.cli import main

from support.run_fixtures import manifest, stream, ticks, write_run


def run_with_ttfts(path: Path, ttfts_by_rep: list[list[float]], clock: str = "wall") -> Path:
    """One group; each stream alone on the server (sequential), decoding 10 tok/s."""
    recs, t = [], 0.0
    for rep, ttfts in enumerate(ttfts_by_rep):
        for i, ttft in enumerate(ttfts):
            recs.append(stream(f"r{rep}s{i}", rep=rep, sent=t, chunks=ticks(t + ttft, 11, 0.1)))
            t += 10.0
    return write_run(path, recs, run=manifest(clock=clock))


def rows_by_field(a: Path, b: Path) -> dict[str, CompareRow]:
    result = compare_summaries(analyze_run(a).summary, analyze_run(b).summary)
    return {r.field: r for r in result.rows}


def test_difference_beyond_the_rep_spread_exceeds_noise(tmp_path: Path):
    a = run_with_ttfts(tmp_path / "a", [[1.0, 1.0], [1.2, 1.2]])
    b = run_with_ttfts(tmp_path / "b", [[1.5, 1.5], [1.6, 1.6]])
    rows = rows_by_field(a, b)
    ttft = rows["ttft_s"]
    assert (ttft.a, ttft.b) == (pytest.approx(1.1), pytest.approx(1.55))
    assert ttft.diff == pytest.approx(0.45)
    assert (ttft.spread_a, ttft.spread_b) == (pytest.approx(0.2), pytest.approx(0.1))
    assert ttft.noise == pytest.approx(0.2)
    assert ttft.verdict == "exceeds noise"
    assert rows["decode_tok_s"].diff == pytest.approx(0.0)
    assert rows["decode_tok_s"].verdict == "within noise"


def test_difference_inside_the_rep_spread_is_within_noise(tmp_path: Path):
    a = run_with_ttfts(tmp_path / "a", [[1.0, 1.0], [1.4, 1.4]])
    b = run_with_ttfts(tmp_path / "b", [[1.1, 1.1], [1.3, 1.3]])
    assert rows_by_field(a, b)["ttft_s"].verdict == "within noise"


def test_single_rep_has_no_spread_to_judge_by(tmp_path: Path):
    a = run_with_ttfts(tmp_path / "a", [[1.0]])
    b = run_with_ttfts(tmp_path / "b", [[2.0]])
    assert rows_by_field(a, b)["ttft_s"].verdict == "no rep spread"


def test_compare_command_prints_the_table(tmp_path: Path):
    a = run_with_ttfts(tmp_path / "a", [[1.0, 1.0], [1.2, 1.2]])
    b = run_with_ttfts(tmp_path / "b", [[1.5, 1.5], [1.6, 1.6]])
    result = CliRunner().invoke(main, ["compare", str(a), str(b)])
    assert result.exit_code == 0, result.output
    assert "exceeds noise" in result.output and "within noise" in result.output
    assert "+0.450" in result.output and "+40.9%" in result.output


def test_compare_rejects_a_missing_path_in_one_line(tmp_path: Path):
    a = run_with_ttfts(tmp_path / "a", [[1.0]])
    result = CliRunner().invoke(main, ["compare", str(a), str(tmp_path / "nope")])
    assert result.exit_code == 1
    assert result.output.strip() == f"Error: {tmp_path / 'nope'}: no such directory"


def test_a_real_run_against_a_virtual_one_is_named_the_sims_error(tmp_path: Path):
    wall = run_with_ttfts(tmp_path / "wall", [[1.0, 1.0]])
    virtual = run_with_ttfts(tmp_path / "virtual", [[1.2, 1.2]], clock="virtual")
    mixed = CliRunner().invoke(main, ["compare", str(wall), str(virtual)])
    assert mixed.exit_code == 0, mixed.output
    assert "one run on the wall clock, one on the virtual clock" in mixed.output
    assert "wall clock, sim" in mixed.output and "virtual clock, sim" in mixed.output
    same = CliRunner().invoke(main, ["compare", str(wall), str(wall)])
    assert same.exit_code == 0 and "one run on the wall clock" not in same.output


def test_a_row_without_a_median_on_one_side_is_missing_not_noise():
    row = CompareRow("g", "ttft_s", "median TTFT", "s", None, 1.5, 0.1, 0.1, 3, 3)
    assert (row.diff, row.diff_pct, row.verdict) == (None, None, "missing")
    both = CompareRow("g", "ttft_s", "median TTFT", "s", 1.0, 1.5, 0.1, 0.6, 3, 3)
    assert (both.noise, both.verdict) == (0.6, "within noise")
    assert both.diff_pct == pytest.approx(50.0)


def unlike(a: Path, b: Path, plans: tuple = (None, None)) -> tuple[str, ...]:
    return compare_summaries(analyze_run(a).summary, analyze_run(b).summary, plans).unlike


def test_runs_that_are_not_like_for_like_say_why(tmp_path: Path):
    # compare read a cut run, another scenario and a --set plan as like for like, silently.
    plan = {"name": "s", "seed": 1, "groups": [{"name": "g", "count": 2, "max_tokens": 8}]}
    base = run_with_ttfts(tmp_path / "base", [[1.0, 1.0]])
    assert unlike(base, base, (plan, {**plan, "seed": 2})) == ()
    cut = write_run(tmp_path / "cut", [stream("s0", sent=0.0, chunks=ticks(1.0, 11, 0.1))],
                    run=manifest(interrupted=True))  # fmt: skip
    assert unlike(base, cut) == (
        "B was interrupted: its figures cover what finished",
        "group g: A 2 ok of 2, B 1 ok of 1",
    )
    other = {**plan, "groups": [{"name": "g", "count": 1, "max_tokens": 4}]}
    assert unlike(base, base, (plan, other)) == (
        "the plans differ (--set or an edited file): groups.g.count 2 vs 1; "
        "groups.g.max_tokens 8 vs 4",
    )
    two = [stream(f"s{i}", sent=10.0 * i, chunks=ticks(10.0 * i + 1, 11, 0.1)) for i in (0, 1)]
    renamed = write_run(tmp_path / "renamed", two,
                        run=manifest(scenario={"name": "t", "groups": []}))  # fmt: skip
    assert unlike(base, renamed)[0].startswith("A ran scenario ")
    assert unlike(base, renamed)[0].endswith(", B ran t: groups of one name may differ in all "
                                             "but the name")  # fmt: skip
    shown = CliRunner().invoke(main, ["compare", str(base), str(cut)])
    assert "!! B was interrupted" in shown.output
