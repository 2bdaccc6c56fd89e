"""How analysis grows with a run's streams: the same scenario at n and 10 n streams on the
virtual clock, each run's analysis (records read, verdicts, summary) and summary.json write
timed per stream.

    .venv/bin/python bench/analysis_scale.py [--streams N] [--smoke]

The scenario (bench/analysis_scale.yaml) sends faster than its sim serves, so every wait grows
over the run: a verdict that judged each wait poll by poll, or scanned every other stream,
made analysis quadratic (20,000 streams of bench/trace_scale.yaml took 41 s). The ratios are
the time per stream at 10 n over the time per stream at n, measured in the same process: 1 is
linear growth, 10 quadratic. n defaults to 2,000 (--smoke: 100).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from harness import parser, ratio, report

from loadgen.analysis.summary import analyze_run, write_summary
from loadgen.engine.run import RunOptions, run_plan
from loadgen.scenario.load import load_scenario
from loadgen.scenario.plan import plan

SCENARIO = Path(__file__).resolve().parent / "analysis_scale.yaml"
DEFAULT_STREAMS, SMOKE_STREAMS, GROWTH = 2000, 100, 10


def timed_analysis(streams: int, out: Path) -> tuple[float, float]:
    """(analysis s, summary.json write s) of a fresh virtual-clock run of `streams` streams."""
    scenario = load_scenario(SCENARIO, [f"arrival.poisson.count={streams}"])
    opts = RunOptions(out_root=out, progress=False, clock="virtual", run_seed=36)
    run_dir = asyncio.run(run_plan(plan(scenario), opts, warn=print))
    t0 = time.perf_counter()
    analysis = analyze_run(run_dir)
    t1 = time.perf_counter()
    write_summary(run_dir, analysis.summary)
    t2 = time.perf_counter()
    verdicts = sorted({row["verdict"] for row in analysis.summary["streams"]})
    size = (run_dir / "summary.json").stat().st_size
    print(f"{streams} streams: analysis {t1 - t0:.2f} s, summary.json {t2 - t1:.2f} s "
          f"({size:,} bytes); verdicts {verdicts}")  # fmt: skip
    if len(analysis.summary["streams"]) != streams:
        raise SystemExit(f"analysis_scale: {streams} planned, the summary has another count")
    return t1 - t0, t2 - t1


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--streams", type=int, help=f"n (default {DEFAULT_STREAMS})")
    args = ap.parse_args()
    n = args.streams or (SMOKE_STREAMS if args.smoke else DEFAULT_STREAMS)
    with tempfile.TemporaryDirectory() as out:
        small = timed_analysis(n, Path(out))
        large = timed_analysis(GROWTH * n, Path(out))
    us = 1e6
    ratios = [
        ratio(f"{what} per stream, {GROWTH * n} streams / {n}", large[i] / (GROWTH * n) * us,
              small[i] / n * us, "us/stream")
        for i, what in enumerate(("analysis", "summary.json write"))
    ]  # fmt: skip
    report(ratios, args.ratios)


if __name__ == "__main__":
    main()
