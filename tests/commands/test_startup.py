"""Each command loads only what it uses (issue 19): `loadgen --version` loaded matplotlib,
aiohttp and the sim, 2.1 s on a 2-core machine. Which modules a command imports is exact,
unlike its time (bench/startup.py measures that)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from support.pacedserver import PacedConfig, ThreadedPacedServer

HEAVY = ("matplotlib", "scipy", "aiohttp", "numpy", "loadgen.sim.engine", "rich")


def imported(*args: str | Path) -> set[str]:
    """Top-level names (and loadgen modules) `python -m loadgen ARGS` imported."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "loadgen", *args],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            names.add(name if name.startswith("loadgen.") else name.split(".")[0])
    return names


@pytest.mark.parametrize(
    ("args", "allowed"),
    [
        (["--version"], ()),
        (["validate", "scenarios/whale_c4.yaml"], ("numpy",)),
        # The options alone: what the command runs is imported once they are read.
        (["request", "--help"], ()),
        # CSV from the analysis alone: no figure, no table renderer.
        (["export", "--help"], ("numpy",)),
    ],
)
def test_a_command_imports_only_what_it_uses(args: list[str], allowed: tuple[str, ...]) -> None:
    loaded = imported(*args)
    assert "click" in loaded  # the parse of importtime's output saw the imports
    assert sorted(m for m in HEAVY if m in loaded and m not in allowed) == []


def test_a_request_loads_no_figures_nor_the_sim(tmp_path: Path) -> None:
    # Its report is tables of its records: matplotlib and the sim's engine are other commands'.
    with ThreadedPacedServer(PacedConfig(ttft_s=0.0, gap_s=0.0)) as srv:
        loaded = imported("request", "--base-url", srv.url, "-n", "2", "--max-tokens", "4",
                          "--out", tmp_path / "probe")  # fmt: skip
    assert (tmp_path / "probe" / "streams.jsonl").is_file()
    allowed = ("aiohttp", "numpy", "rich")
    assert sorted(m for m in HEAVY if m in loaded and m not in allowed) == []
