"""bench/harness.py: a ratio that cannot be computed fails its bench, and `make bench-smoke`
fails when any bench fails, gives no ratio or offers no --smoke, and passes otherwise."""

from __future__ import annotations

import importlib.util
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import REPO

HARNESS = REPO / "bench" / "harness.py"


def _harness():
    """bench/harness.py as a module (bench/ is scripts, not a package)."""
    if "bench_harness" not in sys.modules:
        spec = importlib.util.spec_from_file_location("bench_harness", HARNESS)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_harness"] = module  # dataclass() looks its module up there
        spec.loader.exec_module(module)
    return sys.modules["bench_harness"]


@pytest.mark.parametrize(
    ("measured", "reference"),
    [(1.0, 0.0), (1.0, None), (None, 2.0), (math.nan, 2.0), (1.0, math.inf), (-1.0, 2.0)],
)
def test_a_ratio_that_cannot_be_computed_exits_naming_it(measured, reference) -> None:
    with pytest.raises(SystemExit, match="no ratio for loadgen / bare"):
        _harness().ratio("loadgen / bare", measured, reference, "ev/s")


def test_a_ratio_keeps_its_figures() -> None:
    r = _harness().ratio("loadgen / bare", 50.0, 200.0, "ev/s")
    assert (r.value, r.figures) == (0.25, "50 / 200 ev/s")


GOOD = """
from harness import parser, ratio, report
args = parser("good bench").parse_args()
report([ratio("a / b", 3.0 if args.smoke else 5.0, 2.0, "s", ".1f")], args.ratios)
"""
MISSING_TOOL = """
from harness import parser, report, unavailable
args = parser("a bench whose reference tool is missing").parse_args()
report([unavailable("x / tool", "tool unavailable")], args.ratios)
"""
FAILS = """
from harness import parser
parser("a bench that breaks").parse_args()
raise SystemExit("broke")
"""
NO_RATIO = """
from harness import parser, report
args = parser("a bench that measured nothing").parse_args()
report([], args.ratios)
"""
NO_SMOKE = """
import argparse
argparse.ArgumentParser(description="a bench without --smoke").parse_args()
"""


def _run_benches(tmp_path: Path, **scripts: str) -> subprocess.CompletedProcess[str]:
    shutil.copy(HARNESS, tmp_path / "harness.py")
    for name, text in scripts.items():
        (tmp_path / f"{name}.py").write_text(text)
    return subprocess.run(
        [sys.executable, str(tmp_path / "harness.py"), "--smoke"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_smoke_passes_and_tables_every_ratio(tmp_path: Path) -> None:
    done = _run_benches(tmp_path, good=GOOD, missing_tool=MISSING_TOOL)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _table(done.stdout) == [
        ["good", "a / b", "1.50", "3.0 / 2.0 s"],  # the smoke's figures, not the full run's
        ["missing_tool", "x / tool", "-", "tool unavailable"],
    ]
    assert "FAILED" not in done.stdout


@pytest.mark.parametrize(
    ("script", "why"),
    [
        (FAILS, "exited 1"),
        (NO_RATIO, "exited 1"),
        (NO_SMOKE, "--help exited 0 without offering --smoke"),
    ],
)
def test_smoke_fails_when_a_bench_does(tmp_path: Path, script: str, why: str) -> None:
    done = _run_benches(tmp_path, good=GOOD, bad=script)
    assert done.returncode == 1
    assert f"FAILED bad: {why}" in done.stdout
    assert _table(done.stdout.split("FAILED")[0]) == [["good", "a / b", "1.50", "3.0 / 2.0 s"]]


def _table(stdout: str) -> list[list[str]]:
    """The rows of the table the harness prints last, without its header."""
    lines = stdout.strip().split("\n\n")[-1].splitlines()[1:]
    return [re.split(r"\s{2,}", line.strip()) for line in lines]
