"""The capacity search on a target: one step (an arm at one load) after another, as
analysis/capacity.py's next_step picks them, into RUN/steps/<order>-<load>[.r<k>]/.

One server for the whole search: an external one by URL, the virtual clock's fresh engine per
step, or one boot of the launched server (the sim by default) that every step shares, as a
load sweep's arms share theirs. Each step gets its own salts (a run seed derived from the
search's and the step's order), so no step finds an earlier one's prompts in the cache; a
repeat also draws its own arrival schedule (the scenario seed derived from the repeat), and on
the virtual clock each step's engine its own draws (its seed derived from the search's, the
load and the repeat): the same --seed gives the same search.
run.json lists every step as it ends, so a stopped search keeps what it measured.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loadgen.analysis.capacity import (
    Search,
    SloItem,
    judge,
    judged_rows,
    next_step,
    pooled,
)
from loadgen.analysis.summary import analyze_run
from loadgen.codec import to_json
from loadgen.engine.backends import clock_of, shared_target
from loadgen.engine.options import RunOptions
from loadgen.engine.run import Hooks, base_manifest, open_work_root, run_arm, watched
from loadgen.engine.target import Target
from loadgen.run_manifest import write_manifest
from loadgen.scenario.load_axis import LoadAxis, format_load, with_load
from loadgen.scenario.model import Scenario
from loadgen.scenario.plan import derive_seed, plan


async def search_capacity(
    scenario: Scenario,
    axis: LoadAxis,
    search: Search,
    slo: tuple[SloItem, ...],
    opts: RunOptions,
    hooks: Hooks,
    *,
    max_time_s: float | None = None,
) -> Path:
    """Runs the search; returns its directory. `say` hears one line per step."""
    with watched(opts) as opts:  # one server for every step
        work = open_work_root(scenario, opts, hooks.on_root)
        warn, say = hooks.warn, hooks.say
        root, started, seed = work.path, work.started, work.seed
        manifest = base_manifest(plan(scenario, run_seed=seed), opts, started).add(
            capacity={
                "over": axis.over, "group": axis.group, "requests": axis.requests,
                "slo": [to_json(i) for i in slo], "search": to_json(search),
                "max_time_s": max_time_s,
            },
            runs=(), interrupted=True,
        )  # fmt: skip
        write_manifest(root, manifest)
        steps: list[dict[str, Any]] = []
        deadline = None if max_time_s is None else time.monotonic() + max_time_s
        async with shared_target(scenario, opts, root, warn) as target:
            while (value := next_step(steps, search, slo)) is not None:
                if deadline is not None and time.monotonic() > deadline:
                    manifest = manifest.add(stopped_by=f"--max-time {max_time_s:g} s")
                    break
                step = await _run_step(scenario, axis, value, steps, seed, root, opts, warn, target)
                step |= judge(judged_rows(analyze_run(root / step["dir"]).summary, axis.group), slo)
                steps.append(step)
                ran = {k: step[k] for k in ("value", "label", "repeat", "dir")}
                manifest = manifest.add(runs=(*(manifest.runs or ()), ran))
                write_manifest(root, manifest)
                say(_step_line(len(steps), step, slo))
        write_manifest(root, manifest.add(interrupted=False))
        return root


async def _run_step(
    scenario: Scenario,
    axis: LoadAxis,
    value: float,
    steps: list[dict[str, Any]],
    seed: int,
    root: Path,
    opts: RunOptions,
    warn: Callable[[str], None],
    target: Target | None,
) -> dict[str, Any]:
    repeat = len(pooled(steps, value))
    loaded = with_load(scenario, axis, value)
    if repeat:
        loaded = dataclasses.replace(loaded, seed=derive_seed(scenario.seed, "repeat", repeat))
    order = len(steps) + 1
    # "probe": the label a step's salts were derived under before steps had their name; kept,
    # so a search with a given --seed still sends the prompts it sent then.
    the_plan = plan(loaded, run_seed=derive_seed(seed, "probe", order))
    arm = dataclasses.replace(the_plan.arms[0], name=axis.label(value))
    if clock_of(opts).engine_per_arm:
        # An engine per step draws its speculative acceptance and faults from its own seed,
        # 0 unless given: every step drew the same, and a repeat re-ran its step to the chunk
        # (capacity_seats with speculation: 1,898 chunks and the same last instant in each).
        engine_seed = derive_seed(seed, "engine", value, repeat)
        arm = dataclasses.replace(arm, flags={**arm.flags, "seed": engine_seed})
    name = f"{order:02d}-{axis.label(value)}" + (f".r{repeat}" if repeat else "")
    await run_arm(the_plan, arm, root / "steps" / name, opts, warn, target=target)
    return {"value": value, "label": axis.label(value), "repeat": repeat,
            "dir": f"steps/{name}"}  # fmt: skip


def _step_line(order: int, step: dict[str, Any], slo: tuple[SloItem, ...]) -> str:
    items = ", ".join(
        f"{i.name} {_value(step['items'][i.name]['value'], i)} "
        f"({step['items'][i.name]['attainment']:.0%} within {i.limit:g})"
        for i in slo
    )
    again = f" (repeat {step['repeat']})" if step["repeat"] else ""
    verdict = "meets" if step["passes"] else "misses"
    return f"step {order}: {step['label']}{again}: {verdict} the SLO: {items}"


def _value(value: float | None, item: SloItem) -> str:
    unit = {"tpot": "ms"}.get(item.metric, "s")
    return "-" if value is None else f"{format_load(round(value, 3))}{unit}"
