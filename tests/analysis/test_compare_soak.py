"""`loadgen compare` on soak directories: the soak's own unit (decode tok/s per request on the
server's clock) and its own drift verdict; a soak against a non-soak run is refused."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from loadgen.analysis.stats import median
from loadgen.cli import main


def _soak(out: Path, *extra: str) -> Path:
    args = ["soak", "smoke", "--duration", "1m", "--clock", "virtual", "--no-progress"]
    result = CliRunner().invoke(main, [*args, *extra, "--out", str(out)])
    assert result.exit_code == 0, result.output
    (run_dir,) = out.iterdir()
    return run_dir


@pytest.fixture(scope="module")
def soaks(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    steady = _soak(tmp_path_factory.mktemp("steady"))
    drifting = _soak(tmp_path_factory.mktemp("drift"), "--fault", "drift=3000")
    return steady, drifting


def _cells(output: str, label: str) -> list[str]:
    (line,) = [ln for ln in output.splitlines() if ln.startswith(f"│ {label} ")]
    return [c.strip() for c in line.strip("│").split("│")]


def test_compare_soaks_uses_each_soaks_verdict_and_unit(soaks: tuple[Path, Path]) -> None:
    steady, drifting = soaks
    result = CliRunner().invoke(main, ["compare", str(steady), str(drifting)], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert _cells(result.output, "drift verdict") == [
        "drift verdict",
        "no drift",
        "drift",
        "-",
        "-",
    ]
    rates = []
    for d in (steady, drifting):
        soak = orjson.loads((d / "soak.json").read_bytes())
        rates.append(median(p["rate"] for p in soak["points"]))
    row = _cells(result.output, "median decode tok/s")
    assert row[1:3] == [f"{rates[0]:.1f}", f"{rates[1]:.1f}"]
    assert "within noise" not in result.output
    # The fault is the plan's: compare says so first, as it does for two runs (it said nothing).
    assert result.output.splitlines()[0] == (
        "!! the plans differ (--set or an edited file): sim.faults None vs ['drift=3000']"
    )
    # Quiet both ways: a steady soak against itself is no drift on both sides, and like.
    same = CliRunner().invoke(main, ["compare", str(steady), str(steady)], terminal_width=200)
    assert _cells(same.output, "drift verdict")[1:3] == ["no drift", "no drift"]
    assert "!!" not in same.output


def test_a_soak_cut_short_or_torn_is_said_before_the_comparison(
    soaks: tuple[Path, Path], tmp_path: Path
) -> None:
    steady = soaks[0]
    cut = tmp_path / "cut"
    shutil.copytree(steady, cut)
    manifest = orjson.loads((cut / "run.json").read_bytes())
    (cut / "run.json").write_bytes(orjson.dumps(manifest | {"interrupted": True, "soak_end": None}))
    streams = cut / "streams.jsonl"
    streams.write_bytes(streams.read_bytes()[:-40])
    result = CliRunner().invoke(main, ["compare", str(steady), str(cut)], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[:2] == [
        "!! B was interrupted: its figures cover what finished",
        "!! B: TORN: 1 line(s) of streams.jsonl could not be read",
    ]


def test_soak_against_a_non_soak_run_is_refused_in_one_line(
    soaks: tuple[Path, Path], tmp_path: Path
) -> None:
    run = CliRunner().invoke(
        main, ["run", "smoke", "--clock", "virtual", "--no-progress", "--out", str(tmp_path)]
    )
    assert run.exit_code == 0, run.output
    (plain,) = tmp_path.iterdir()
    steady = soaks[0]
    for a, b in ((steady, plain), (plain, steady)):
        result = CliRunner().invoke(main, ["compare", str(a), str(b)], terminal_width=400)
        assert result.exit_code == 1
        assert result.output.splitlines() == [
            f"Error: cannot compare soak {steady} with non-soak run {plain}: compare two soaks "
            "(drift verdicts) or two runs (per-group medians)"
        ]
    both_plain = CliRunner().invoke(main, ["compare", str(plain), str(plain)])
    assert both_plain.exit_code == 0, both_plain.output
    assert "Compare (B - A, per group" in both_plain.output
