"""Mooncake traces replayed into the sim over loopback: a scenario written around a trace file, and
the run's directory with the sim's ground truth."""

from pathlib import Path

from loadgen.engine.run import RunOptions, run_plan
from loadgen.report.cmd import write_report
from loadgen.scenario.load import load_scenario
from loadgen.scenario.plan import plan
from loadgen.sim.engine import EngineConfig
from loadgen.sim.profiles import sim_profile
from loadgen.sim.server import SimServerConfig, ground_truth_rows, start_sim_server

from support.paths import DATA

SHARED = DATA / "mooncake_shared.jsonl"


def write_scenario(folder: Path, trace: Path, *, sharing: str | None = None,
                   limit: int | None = None, time_scale: float = 0.05,
                   num_gpu_blocks: int = 4096) -> Path:  # fmt: skip
    extra = "" if sharing is None else f"\n    sharing: {sharing}"
    extra += "" if limit is None else f"\n    limit: {limit}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "replay.yaml"
    path.write_text(f"""
name: replay
seed: 3
groups:
  - name: rows
    prompt: {{}}
arrival:
  trace:
    path: {trace}
    time_scale: {time_scale}{extra}
sim:
  profile: tiny
  block_size: 16
  num_gpu_blocks: {num_gpu_blocks}
  max_num_batched_tokens: 8192
""")
    return path


async def replay(folder: Path, trace: Path, **kw) -> tuple[Path, list[dict]]:
    scenario_kw = {k: v for k, v in kw.items() if k != "max_model_len"}
    s = load_scenario(write_scenario(folder, trace, **scenario_kw))
    config = SimServerConfig(
        engine=EngineConfig(
            max_num_seqs=64, max_num_batched_tokens=8192, block_size=16,
            num_gpu_blocks=kw.get("num_gpu_blocks", 4096), enable_prefix_caching=True,
            profile=sim_profile("tiny"),
        ),
        max_model_len=kw.get("max_model_len", 16384),
    )  # fmt: skip
    async with start_sim_server(config) as sim:
        opts = RunOptions(base_url=sim.url, out_root=folder / "runs", progress=False)
        run_dir = await run_plan(plan(s), opts, warn=lambda m: None)
        truth = ground_truth_rows(sim.state)
    write_report(run_dir)
    return run_dir, truth
