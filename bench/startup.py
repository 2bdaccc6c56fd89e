"""How long each command takes to start, against the interpreter's own start measured in the
same run (`python -c pass`), so the ratio compares across machines.

    .venv/bin/python bench/startup.py [--repeat N]

Prints, per command, the median wall time of N runs and its ratio to the bare interpreter's.
tests/test_startup.py pins which modules each command imports; this is the time that costs.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = (
    ("python -c pass (reference)", ["-c", "pass"]),
    ("loadgen --version", ["-m", "loadgen", "--version"]),
    ("loadgen validate whale_c4", ["-m", "loadgen", "validate", "scenarios/whale_c4.yaml"]),
    ("loadgen request --help", ["-m", "loadgen", "request", "--help"]),
    ("loadgen run --help", ["-m", "loadgen", "run", "--help"]),
)


def median_wall_s(args: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, *args], cwd=ROOT, check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    repeat = parser.parse_args().repeat
    reference = None
    for name, args in COMMANDS:
        wall = median_wall_s(args, repeat)
        reference = reference or wall
        print(f"{name:32} {wall * 1e3:7.0f} ms  x{wall / reference:5.1f}")


if __name__ == "__main__":
    main()
