"""Runs one scenario on the real vLLM (CPU build, tiny model) and on loadgen's sim configured like
it, and prints the two reports side by side: every report table with the two servers' rows
interleaved per group, the per-stream verdicts, and `loadgen compare`'s table (A = vLLM,
B = sim).

    .venv/bin/python tools/compare_sim_vllm.py [--out DIR] [--sim-speed 0.7] [--set k=v ...]

The sim mirrors vLLM's scheduler flags (--max-num-seqs, --max-num-batched-tokens, block size
32, the KV pool in blocks, max model len) as the vLLM launch reported them, on the `default`
step profile slowed by --sim-speed: at 0.7 a 6000-token prefill (~0.5 s) and a lone stream's
decode (~900 tok/s) are near the tiny model's on a 2-core CPU. The servers run one after the
other, never together, so neither steals the other's core.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from loadgen.analysis.compare import compare_summaries
from loadgen.analysis.summary import analyze_run
from loadgen.engine.run import RunOptions, run_plan
from loadgen.report.cmd import compare_table, write_report
from loadgen.report.tables import Table, secs
from loadgen.report.text import render_rich, run_tables
from loadgen.scenario.load import load_scenario
from loadgen.scenario.plan import plan
from loadgen.server import installs
from loadgen.server.launcher import Server, launch
from loadgen.server.profile import ServerFacts
from loadgen.server.sim import SimProfile

ROOT = Path(__file__).resolve().parent.parent
WHALE = ROOT / "tests" / "data" / "scenarios" / "real_whale.yaml"
VLLM_FLAGS = ("--max-num-seqs", "4", "--max-num-batched-tokens", "512")
SIM_PROFILE = "default"
SIM_SPEED = 0.7
# vLLM fact -> the sim's flag that sets it.
MIRRORED = {
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "block_size": "--block-size",
    "num_gpu_blocks": "--num-gpu-blocks",
    "max_model_len": "--max-model-len",
}
LABELS = ("vllm", "sim")


@dataclass(frozen=True)
class SideBySide:
    """Both runs of the scenario, their summaries, and the printed comparison."""

    vllm_dir: Path
    sim_dir: Path
    vllm: dict[str, Any]
    sim: dict[str, Any]
    sim_flags: tuple[str, ...]
    text: str


def run_options(server: Server, out_root: Path, run_seed: int | None = None) -> RunOptions:
    """Options for a run against a server the launcher started: its URL and model, and the
    limits it read back (each with its source), so verdicts judge against the real cap."""
    facts = {k: v for k, v in server.facts.to_json().items() if isinstance(v, int)}
    return RunOptions(
        base_url=server.url,
        model=server.model,
        out_root=out_root,
        run_seed=run_seed,
        progress=False,
        server_facts=facts,
        server_facts_sources=dict(server.facts.sources),
    )


async def run_on(
    server: Server,
    scenario: Path,
    out_root: Path,
    overrides: Sequence[str] = (),
    run_seed: int | None = None,
) -> Path:
    """Runs the scenario (with `--set` style overrides) against the server; returns the run
    directory with its report written. A boot keeps its prefix cache between runs, and salts
    derive from the run seed: a second run on one boot needs a seed of its own."""
    scn = load_scenario(scenario, list(overrides))
    opts = run_options(server, out_root, run_seed)
    run_dir = await run_plan(plan(scn, run_seed=run_seed), opts, warn=_echo_warning)
    write_report(run_dir)
    return run_dir


def _echo_warning(message: str) -> None:
    click.echo(f"warning: {message}", err=True)


def sim_flags_like(facts: ServerFacts, profile: str, speed: float) -> list[str]:
    """The sim's flags for the limits vLLM reported, on `profile` slowed to `speed`."""
    flags = ["--profile", profile, "--speed", f"{speed:g}"]
    for fact, flag in MIRRORED.items():
        value = getattr(facts, fact)
        if value is not None:
            flags += [flag, str(value)]
    return flags


async def compare_sim_vllm(
    out_root: Path,
    *,
    scenario: Path = WHALE,
    overrides: Sequence[str] = (),
    vllm_flags: Sequence[str] = VLLM_FLAGS,
    sim_profile: str = SIM_PROFILE,
    sim_speed: float = SIM_SPEED,
) -> SideBySide:
    """Runs the scenario on vLLM, then on a sim given vLLM's limits; compares the two."""
    async with launch(
        "vllm", flags=vllm_flags, log_dir=out_root / "logs", model=installs.tiny_model_dir()
    ) as vllm:
        vllm_dir = await run_on(vllm, scenario, out_root / "vllm", overrides)
        flags = sim_flags_like(vllm.facts, sim_profile, sim_speed)
    async with launch(SimProfile(), flags=flags, log_dir=out_root / "logs") as sim:
        sim_dir = await run_on(sim, scenario, out_root / "sim", overrides)
    a, b = analyze_run(vllm_dir).summary, analyze_run(sim_dir).summary
    return SideBySide(vllm_dir, sim_dir, a, b, tuple(flags), side_by_side(vllm_dir, sim_dir, a, b))


def side_by_side(a_dir: Path, b_dir: Path, a: dict[str, Any], b: dict[str, Any]) -> str:
    """Both reports' tables with the two runs' rows interleaved, the per-stream verdicts, and
    the compare table."""
    tables = [
        paired(ta, tb)
        for ta, tb in zip(run_tables(a), run_tables(b), strict=False)
        if _same(ta, tb)
    ]
    tables += [verdicts_by_stream(a, b), compare_table(compare_summaries(a, b), a_dir, b_dir)]
    head = [f"A = {LABELS[0]}: {a_dir}", f"B = {LABELS[1]}: {b_dir}"]
    return render_rich(tables, head, width=160)


def _same(a: Table, b: Table) -> bool:
    return a.title == b.title and a.columns == b.columns


def paired(a: Table, b: Table) -> Table:
    """One table of both runs: each row of A followed by B's row of the same first cell, with
    a `server` column naming whose row it is."""
    keys = list(dict.fromkeys([r[0] for r in a.rows] + [r[0] for r in b.rows]))
    rows = []
    for key in keys:
        for label, table in zip(LABELS, (a, b), strict=True):
            rows += [(r[0], label, *r[1:]) for r in table.rows if r[0] == key]
    notes = tuple(f"{LABELS[0]}: {n}" for n in a.notes)
    notes += tuple(f"{LABELS[1]}: {n}" for n in b.notes if n not in a.notes)
    left = frozenset({0, 1} | {i + 1 for i in a.left if i > 0})
    return Table(a.title, (a.columns[0], "server", *a.columns[1:]), tuple(rows), notes, left)


def verdicts_by_stream(a: dict[str, Any], b: dict[str, Any]) -> Table:
    """stream | vLLM verdict, TTFT | sim verdict, TTFT (same ids: same scenario and seed)."""
    sa, sb = _by_id(a), _by_id(b)
    rows = []
    for sid in sorted(set(sa) | set(sb)):
        cells: list[str] = [sid]
        for side in (sa, sb):
            s = side.get(sid)
            cells += ["-", "-"] if s is None else [s["verdict"], secs(s["ttft_s"])]
        rows.append(tuple(cells))
    cols = ("stream", f"{LABELS[0]} verdict", "TTFT s", f"{LABELS[1]} verdict", "TTFT s")
    return Table("Verdict per stream", cols, tuple(rows), (), frozenset({0, 1, 3}))


def _by_id(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["id"]: s for s in summary["streams"] if s["phase"] == "measure"}


def group_verdicts(summary: dict[str, Any], group: str) -> list[str]:
    """The group's measured verdicts, in stream id order."""
    return [s["verdict"] for _, s in sorted(_by_id(summary).items()) if s["group"] == group]


@click.command()
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Where the run directories go (default: a new temporary folder).")  # fmt: skip
@click.option("--scenario", type=click.Path(exists=True, path_type=Path), default=WHALE,
              show_default=True)  # fmt: skip
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Scenario override, as `loadgen run --set`.")  # fmt: skip
@click.option("--sim-speed", type=click.FloatRange(min=0.0, min_open=True), default=SIM_SPEED,
              show_default=True)  # fmt: skip
@click.option("--sim-profile", default=SIM_PROFILE, show_default=True)
def main(
    out: Path | None, scenario: Path, overrides: tuple[str, ...], sim_speed: float, sim_profile: str
) -> None:
    """Run SCENARIO on vLLM and on the sim configured like it; print both side by side."""
    out_root = out if out is not None else Path(tempfile.mkdtemp(prefix="compare-sim-vllm-"))
    result = asyncio.run(
        compare_sim_vllm(
            out_root,
            scenario=scenario,
            overrides=overrides,
            sim_profile=sim_profile,
            sim_speed=sim_speed,
        )
    )
    click.echo(f"sim flags: {' '.join(result.sim_flags)}")
    click.echo(result.text, nl=False)


if __name__ == "__main__":
    main()
