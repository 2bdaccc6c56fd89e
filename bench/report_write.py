"""Where report writing's time goes: a scenario run on the virtual clock, then write_report
(summary.json, report.txt, report.html and its figures, for a sweep every arm's too) timed and
profiled.

    .venv/bin/python bench/report_write.py SCENARIO [--set k=v ...] [--repeat N]

e.g. `bench/report_write.py scenarios/politeness_fine.yaml` (a 10-arm sweep), or any scenario
with thousands of streams (a Poisson arrival with `count: 2000`; bench/trace_scale.yaml has
20,000).

Prints the run's wall time, then each write_report's wall and CPU time, then the share of the
profiled write per stage (analysis, matplotlib drawing, PNG encoding, HTML). Shares are of the
same write's profiled total, so they compare stages with each other, not with another machine.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import tempfile
import time
from pathlib import Path

from virtual_scale import print_stage_shares  # bench/ is on sys.path when run as a script

from loadgen.engine.run import RunOptions, run_plan
from loadgen.report.cmd import write_report
from loadgen.scenario.load import load_scenario
from loadgen.scenario.plan import plan

STAGES = (
    ("PNG encoding (savefig, agg draw)", ("backend_agg", "_png", "image.py")),
    ("matplotlib artists, layout, text", ("matplotlib",)),
    ("analysis (loadgen/analysis)", ("loadgen/analysis", "hdrh")),
    ("report text + html (loadgen/report)", ("loadgen/report",)),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario")
    ap.add_argument("--set", dest="sets", action="append", default=[])
    ap.add_argument("--repeat", type=int, default=1, help="write the report N times (timed)")
    ap.add_argument("--no-profile", action="store_true", help="time only (no profiler overhead)")
    args = ap.parse_args()
    scenario = load_scenario(args.scenario, args.sets)
    with tempfile.TemporaryDirectory() as out:
        opts = RunOptions(out_root=Path(out), progress=False, clock="virtual")
        t0 = time.perf_counter()
        run_dir = asyncio.run(run_plan(plan(scenario), opts, warn=print))
        print(f"{scenario.name}: run {time.perf_counter() - t0:.1f} s wall")
        for i in range(args.repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            write_report(run_dir)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            print(f"write_report #{i + 1}: {wall:.2f} s wall, {cpu:.2f} s CPU")
        html = sum(p.stat().st_size for p in run_dir.rglob("report.html"))
        print(f"report.html bytes (all): {html:,}")
        if args.no_profile:
            return
        prof = cProfile.Profile()
        prof.enable()
        write_report(run_dir)
        prof.disable()
    print_stage_shares(prof, STAGES)
    pstats.Stats(prof).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
