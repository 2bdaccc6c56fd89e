"""Where report writing's time goes: a scenario run on the virtual clock, then write_report
(summary.json, report.txt, report.html and its figures, for a sweep every arm's too) timed and
profiled.

    .venv/bin/python bench/report_write.py [SCENARIO] [--set k=v ...] [--repeat N] [--smoke]

SCENARIO (a file or a name in scenarios/) defaults to politeness_fine (a 10-arm sweep;
--smoke: whale_c4); any scenario with thousands of streams is worth a look too (a Poisson
arrival with `count: 2000`; bench/trace_scale.yaml has 20,000).

Prints the run's wall time, then each write_report's wall and CPU time, then the share of the
profiled write per stage (analysis, matplotlib drawing, PNG encoding, HTML). Shares are of the
same write's profiled total, so they compare stages with each other, not with another machine.
The ratio is the first write_report's wall time over the run's: what the report costs beside
what it reports on.
"""

from __future__ import annotations

import asyncio
import cProfile
import pstats
import tempfile
import time
from pathlib import Path

from harness import parser, ratio, report
from virtual_scale import print_stage_shares  # bench/ is on sys.path when run as a script

from loadgen.engine.run import RunOptions, run_plan
from loadgen.report.cmd import write_report
from loadgen.scenario.load import load_scenario
from loadgen.scenario.plan import plan

DEFAULT_SCENARIO = "politeness_fine"
STAGES = (
    ("PNG encoding (savefig, agg draw)", ("backend_agg", "_png", "image.py")),
    ("matplotlib artists, layout, text", ("matplotlib",)),
    ("analysis (loadgen/analysis)", ("loadgen/analysis", "hdrh")),
    ("report text + html (loadgen/report)", ("loadgen/report",)),
)


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("scenario", nargs="?")
    ap.add_argument("--set", dest="sets", action="append", default=[])
    ap.add_argument("--repeat", type=int, default=1, help="write the report N times (timed)")
    ap.add_argument("--no-profile", action="store_true", help="time only (no profiler overhead)")
    args = ap.parse_args()
    name = args.scenario or ("whale_c4" if args.smoke else DEFAULT_SCENARIO)
    scenario = load_scenario(name, args.sets)
    with tempfile.TemporaryDirectory() as out:
        opts = RunOptions(out_root=Path(out), progress=False, clock="virtual")
        t0 = time.perf_counter()
        run_dir = asyncio.run(run_plan(plan(scenario), opts, warn=print))
        run_s = time.perf_counter() - t0
        print(f"{scenario.name}: run {run_s:.1f} s wall")
        writes = []
        for i in range(max(1, args.repeat)):
            t0, c0 = time.perf_counter(), time.process_time()
            write_report(run_dir)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            writes.append(wall)
            print(f"write_report #{i + 1}: {wall:.2f} s wall, {cpu:.2f} s CPU")
        html = sum(p.stat().st_size for p in run_dir.rglob("report.html"))
        print(f"report.html bytes (all): {html:,}")
        if html == 0:
            raise SystemExit(f"{scenario.name}: write_report wrote no report.html")
        if not args.no_profile:
            prof = cProfile.Profile()
            prof.enable()
            write_report(run_dir)
            prof.disable()
            print_stage_shares(prof, STAGES)
            pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
    compared = f"write_report / the run it reports, wall, {scenario.name} (virtual clock)"
    report([ratio(compared, writes[0], run_s, "s", ".2f")], args.ratios)


if __name__ == "__main__":
    main()
