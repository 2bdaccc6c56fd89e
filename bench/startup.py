"""How long each command takes to start, against the interpreter's own start measured in the
same run (`python -c pass`), so the ratio compares across machines.

    .venv/bin/python bench/startup.py [--smoke] [--repeat N]

Prints, per command, the median wall time of N runs and its ratio to the bare interpreter's.
tests/commands/test_startup.py pins which modules each command imports; this is the time that costs.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

from harness import parser, ratio, report

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
        done = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True)
        times.append(time.perf_counter() - t0)
        if done.returncode != 0:
            why = done.stderr.decode().strip().splitlines()[-1:]
            raise SystemExit(f"{' '.join(args)}: exit {done.returncode} {why}")
    return statistics.median(times)


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    repeat = 1 if args.smoke else args.repeat
    (_, ref_args), *commands = COMMANDS
    reference = median_wall_s(ref_args, repeat)
    ratios = [
        ratio(f"{name} / python -c pass, wall", median_wall_s(cmd, repeat) * 1e3,
              reference * 1e3, "ms")
        for name, cmd in commands
    ]  # fmt: skip
    report(ratios, args.ratios)


if __name__ == "__main__":
    main()
