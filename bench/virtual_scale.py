"""Where the virtual clock's time goes: a scenario run with --clock virtual under cProfile.

    .venv/bin/python bench/virtual_scale.py [SCENARIO] [--set k=v ...] [--no-profile] [--smoke]

SCENARIO (a file or a name in scenarios/) defaults to bench/trace_scale.yaml cut to 4,000
streams (--smoke: 200); e.g. the Azure LLM code trace (8,819 rows, an hour) on a 64-seat sim:

    .venv/bin/python bench/virtual_scale.py scenarios/azure_code.yaml \
        --set arrival.trace.path=/work/shared/traces/azure_llm_2023/AzureLLMInferenceTrace_code.csv

Prints the wall and CPU time of the run (report writing excluded), the virtual time it covered
(the speed-up over real time), and the share of self time per stage: prompt text generation,
prompt sizing, the sim tokenizer, the engine core (scheduler, KV pool), /metrics exposition and
parsing, record writing, the driver itself. Shares are of the same run's profiled total, so
they compare stages with each other, not with another machine. The ratio is the speed-up:
virtual time covered over the run's wall time (under cProfile unless --no-profile).
"""

from __future__ import annotations

import asyncio
import cProfile
import pstats
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from harness import parser, ratio, report

from loadgen.analysis.inputs import arm_dirs
from loadgen.engine.run import RunOptions, run_plan
from loadgen.records import read_streams
from loadgen.scenario.load import load_scenario
from loadgen.scenario.plan import plan

TRACE_SCALE = Path(__file__).resolve().parent / "trace_scale.yaml"
DEFAULT_STREAMS, SMOKE_STREAMS = 4000, 200
STAGES = (
    ("prompt text (scenario/textgen)", ("loadgen/scenario/textgen", "/random.py")),
    ("prompt sizing (scenario/prompts)", ("loadgen/scenario/prompts",)),
    ("sim tokenizer", ("loadgen/sim/tokenizer",)),
    ("engine core (sim/engine, kvcache, requests)", ("loadgen/sim/engine", "loadgen/sim/kv",
                                                      "loadgen/sim/requests", "hashlib")),
    ("/metrics exposition + poller parse", ("prometheus_client", "loadgen/sim/metrics",
                                            "loadgen/engine/poller")),
    ("records (json, files)", ("loadgen/records", "orjson", "dataclasses")),
    ("virtual driver (sim/virtual, engine/virtual_run)", ("loadgen/sim/virtual",
                                                          "loadgen/engine/virtual_run")),
)  # fmt: skip


def stage_of(key: tuple[str, int, str], stages: tuple[tuple[str, tuple[str, ...]], ...]) -> str:
    where = f"{key[0]}:{key[2]}"
    for name, needles in stages:
        if any(n in where for n in needles):
            return name
    return "other"


def print_stage_shares(
    prof: cProfile.Profile, stages: tuple[tuple[str, tuple[str, ...]], ...] = STAGES
) -> None:
    """Each stage's share of the profiled self time, largest first."""
    by_stage: dict[str, float] = defaultdict(float)
    stats = pstats.Stats(prof)
    for key, (_, _, tottime, _, callers) in stats.stats.items():  # type: ignore[attr-defined]
        if key[0] != "~":
            by_stage[stage_of(key, stages)] += tottime
            continue
        # A builtin (regex, list, len...) has no file: its time goes to the stages calling it.
        for caller, (_, _, caller_tt, _) in callers.items():
            by_stage[stage_of(caller, stages)] += caller_tt
    total = sum(by_stage.values())
    print(f"profiled: {total:.2f} s")
    for name, t in sorted(by_stage.items(), key=lambda kv: -kv[1]):
        print(f"  {t / total * 100:5.1f}%  {name}")


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("scenario", nargs="?")
    ap.add_argument("--set", dest="sets", action="append", default=[])
    ap.add_argument("--no-profile", action="store_true", help="time only (no profiler overhead)")
    args = ap.parse_args()
    if args.scenario is None:
        streams = SMOKE_STREAMS if args.smoke else DEFAULT_STREAMS
        args.scenario, args.sets = TRACE_SCALE, [f"arrival.poisson.count={streams}", *args.sets]
    scenario = load_scenario(args.scenario, args.sets)
    with tempfile.TemporaryDirectory() as out:
        opts = RunOptions(out_root=Path(out), progress=False, clock="virtual")
        prof = None if args.no_profile else cProfile.Profile()
        t0, c0 = time.perf_counter(), time.process_time()
        if prof:
            prof.enable()
        run_dir = asyncio.run(run_plan(plan(scenario), opts, warn=print))
        if prof:
            prof.disable()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        # A sweep's records live in its arms' directories, one fresh engine each.
        records = [r for d in (arm_dirs(run_dir) or [run_dir]) for r in read_streams(d)]
    # Each arm's clock starts at 0: the virtual time covered is the sum of the arms' ends.
    ends: dict[str | None, int] = {}
    for r in records:
        ends[r.arm] = max(ends.get(r.arm, 0), r.t_done_ns or 0)
    virtual_s = sum(ends.values()) / 1e9
    ok = sum(r.status == "ok" for r in records)
    mismatched = sum(r.prompt_tokens != r.requested_prompt_tokens for r in records)
    print(f"{scenario.name}: {len(records)} streams ({ok} ok), {virtual_s:.0f} s of virtual time")
    print(f"run: {wall:.1f} s wall, {cpu:.1f} s CPU ({virtual_s / wall:.0f}x real time)"
          f"{' under cProfile' if prof else ''}; prompts off their size: {mismatched}")  # fmt: skip
    if prof is not None:
        print_stage_shares(prof)
    if ok == 0:
        raise SystemExit(f"{scenario.name}: no stream ended ok on the virtual clock")
    how = "under cProfile" if prof else "unprofiled"
    compared = f"virtual time covered / wall time, {scenario.name} {len(records)} streams ({how})"
    report([ratio(compared, virtual_s, wall, "s", ".2f")], args.ratios)


if __name__ == "__main__":
    main()
