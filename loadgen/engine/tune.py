"""`loadgen tune` on the virtual clock, then on the server: every point of the flag grid (or,
past `max_points`, a coordinate descent through it) run with the fitted profile into
TUNE/virtual/arms/<point>/, one line per point; then, with `verify`, the top points as a sweep
on the launched server (2 boots per arm, interleaved: boots.py) into TUNE/verify/.
run.json lists every point as it ends, so a stopped search keeps what it evaluated.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.analysis.capacity import Search
from loadgen.analysis.load_sweep import LoadRow, load_row
from loadgen.analysis.slo import SloItem
from loadgen.analysis.summary import analyze_run
from loadgen.analysis.tune import CAPACITY, VERIFY, VIRTUAL, binding, capacity_point, score
from loadgen.codec import to_json
from loadgen.engine.backends import clock_of
from loadgen.engine.capacity import search_capacity
from loadgen.engine.options import RunOptions
from loadgen.engine.run import Hooks, arm_info, base_manifest, open_work_root, run_arm, run_plan
from loadgen.run_manifest import RunManifest, write_manifest
from loadgen.scenario.load_axis import LoadAxis
from loadgen.scenario.model import Scenario, SimConfig, Sweep, SweepArm
from loadgen.scenario.plan import ArmPlan, Plan, plan
from loadgen.server.spec import flag_args, launch_flags, profile_for
from loadgen.sim.profile_file import load_profile_file

# Boots per verified arm: the seed's retest retracted an 8.7% "regression" seen on one boot.
VERIFY_BOOTS = 2
EXHAUSTIVE, DESCENT = "exhaustive", "coordinate_descent"


@dataclass(frozen=True, slots=True)
class TuneAsk:
    """What to search: the predicted scenario (profile applied) with its grid as a sweep, the
    scenario the server runs, the objective and SLO, the bounds, and how many to verify."""

    predicted: Scenario
    real: Scenario
    profile: Path
    objective: str
    slo: tuple[SloItem, ...]
    max_points: int
    max_time_s: float
    verify: int = 0
    # --objective capacity: each point's capacity search (the load axis and its bounds).
    capacity: CapacityAsk | None = None


@dataclass(frozen=True, slots=True)
class CapacityAsk:
    """`--objective capacity`: the load each point's capacity search varies, and its bounds."""

    axis: LoadAxis
    search: Search


def grid(sweep: Sweep) -> list[tuple[int, ...]]:
    """Each arm's index on every axis, in the sweep's arm order (first axis slowest)."""
    sizes = [len(values) for _, values in sweep.axes]
    out = []
    for flat in range(len(sweep.arms)):
        idx = []
        for size in reversed(sizes):
            idx.append(flat % size)
            flat //= size
        out.append(tuple(reversed(idx)))
    return out


def descent_order(
    sizes: list[int], value_of: Callable[[tuple[int, ...]], float | None], budget: int
) -> None:
    """Coordinate descent: from the middle of every axis, try each value of one axis with the
    others held, move to the best, next axis; until a full pass moves nothing or `budget`
    points were asked for. `value_of` evaluates (and remembers) a point; None: not evaluated."""
    at = tuple(s // 2 for s in sizes)
    asked: set[tuple[int, ...]] = set()
    moved = True
    while moved:
        moved = False
        for axis, size in enumerate(sizes):
            line = [(*at[:axis], i, *at[axis + 1 :]) for i in range(size)]
            scores = {}
            for point in line:
                if point not in asked and len(asked) >= budget:
                    continue
                asked.add(point)
                scores[point] = value_of(point)
            known = {p: v for p, v in scores.items() if v is not None}
            if not known:
                return
            best = max(known, key=lambda p: (known[p], -line.index(p)))
            if best != at and known[best] > (known.get(at) or -math.inf):
                at, moved = best, True


async def run_tune(ask: TuneAsk, opts: RunOptions, hooks: Hooks) -> Path:
    """Runs the search (and the verification); returns TUNE."""
    work = open_work_root(ask.predicted, opts, hooks.on_root, "-tune")
    root, seed = work.path, work.seed
    sweep = ask.predicted.sweep
    assert sweep is not None, "tune's scenario carries its grid as a sweep"
    method = EXHAUSTIVE if len(sweep.arms) <= ask.max_points else DESCENT
    text = ask.profile.read_bytes()
    config: dict[str, Any] = {
            "scenario": ask.predicted.name, "objective": ask.objective,
            "slo": [to_json(i) for i in ask.slo], "axes": [[k, list(v)] for k, v in sweep.axes],
            "method": method, "grid_points": len(sweep.arms), "max_points": ask.max_points,
            "max_time_s": ask.max_time_s, "verify": ask.verify, "points": [],
            "capacity": None if ask.capacity is None else {
                "over": ask.capacity.axis.over, "group": ask.capacity.axis.group,
                "requests": ask.capacity.axis.requests, "search": to_json(ask.capacity.search)},
            "profile": {"path": str(ask.profile), "name": load_profile_file(ask.profile).name,
                        "sha256": hashlib.sha256(text).hexdigest()},
    }  # fmt: skip
    # `config` grows as points run (their list, a stop, the verified arms' command lines);
    # run.json is written again after each change.
    manifest = _TuneManifest(root, config, seed, work.started)
    virtual = dataclasses.replace(opts.on_virtual_sim(), run_seed=seed)
    the_plan = plan(ask.predicted, run_seed=seed)
    points = _Evaluator(ask, the_plan, virtual, root / VIRTUAL, hooks, manifest, root, work.started)
    deadline = time.monotonic() + ask.max_time_s
    indices = grid(sweep)
    if method == EXHAUSTIVE:
        for i in range(len(indices)):
            if not await points.run(i, deadline):
                break
    else:
        await points.descend(indices, deadline)
    if ask.verify:
        await _verify(ask, points.ranked(), opts, root, hooks, seed, manifest)
    manifest.save(interrupted=False)
    return root


class _TuneManifest:
    """TUNE's run.json: the head and the tune block, written whole after each change."""

    def __init__(self, root: Path, config: dict[str, Any], seed: int, started: dt.datetime):
        self.root, self.config = root, config
        self.head = RunManifest(seed=seed, started_wall=started.isoformat())
        self.save()

    def save(self, *, interrupted: bool = True) -> None:
        write_manifest(self.root, self.head.add(tune=dict(self.config), interrupted=interrupted))


class _Evaluator:
    """Runs points on the virtual clock into one sweep directory, keeping the parent's run.json
    (the arms so far) and TUNE's list of points current after each."""

    def __init__(self, ask: TuneAsk, the_plan: Plan, opts: RunOptions, path: Path,
                 hooks: Hooks, manifest: _TuneManifest, root: Path,
                 started: dt.datetime) -> None:  # fmt: skip
        self.ask, self.plan, self.opts, self.path = ask, the_plan, opts, path
        self.warn, self.say, self.manifest, self.root = hooks.warn, hooks.say, manifest, root
        self.scores: dict[int, float | None] = {}
        per_arm, note = clock_of(opts).unbooted
        self.parent = base_manifest(the_plan, opts, started).add(
            arms=(), boots_per_arm=per_arm, boots_note=note
        )

    async def run(self, i: int, deadline: float) -> bool:
        """Evaluates arm `i` unless the time is up (then False)."""
        if i in self.scores:
            return True
        if time.monotonic() > deadline:
            self.manifest.config["stopped_by"] = f"--max-time {self.ask.max_time_s:g} s"
            self.manifest.save()
            return False
        arm = self.plan.arms[i]
        if self.ask.capacity is None:
            value, cause, row = await self._once(arm)
        else:
            value, cause, row = await self._capacity(arm, self.ask.capacity, deadline)
        self.scores[i] = value
        self.manifest.config["points"].append({"name": arm.name, "flags": arm.flags})
        self.manifest.save()
        shown = "-" if value is None else f"{value:.4g}"
        self.say(f"point {len(self.scores)}: {arm.name}: {self.ask.objective} {shown} "
                 f"({cause}; p90 TTFT {_ms(row.ttft_p90_ms)})")  # fmt: skip
        return True

    async def _once(self, arm: ArmPlan) -> tuple[float | None, str, LoadRow]:
        """The point at the scenario's own load: one arm of the virtual sweep."""
        await run_arm(self.plan, arm, self.path / "arms" / arm.name, self.opts, self.warn)
        self.parent = self.parent.add(arms=(*(self.parent.arms or ()), arm_info(arm)))
        write_manifest(self.path, self.parent)
        summary = analyze_run(self.path / "arms" / arm.name).summary
        cause, _ = binding(summary, self.ask.slo, arm.name)
        return score(summary, self.ask.objective), cause, load_row(summary)

    async def _capacity(
        self, arm: ArmPlan, ask: CapacityAsk, deadline: float
    ) -> tuple[float | None, str, LoadRow]:
        """The point's capacity search on the virtual clock, into TUNE/capacity/<point>/."""
        sim = self.ask.predicted.sim or SimConfig()
        scenario = dataclasses.replace(
            self.ask.predicted, sweep=None, sim=dataclasses.replace(sim, **arm.flags)
        )
        out = dataclasses.replace(self.opts, out_root=self.root / CAPACITY / arm.name)
        left = max(1.0, deadline - time.monotonic())
        path = await search_capacity(scenario, ask.axis, ask.search, self.ask.slo, out,
                                     Hooks(self.warn), max_time_s=left)  # fmt: skip
        point = capacity_point(arm.name, arm.flags, path)
        return point.objective, point.binding, point.row

    async def descend(self, indices: list[tuple[int, ...]], deadline: float) -> None:
        """Coordinate descent through the grid, at most max_points points."""
        sweep = self.ask.predicted.sweep
        assert sweep is not None
        flat = {idx: i for i, idx in enumerate(indices)}
        pending: list[tuple[int, ...]] = []

        def value_of(idx: tuple[int, ...]) -> float | None:
            pending.append(idx)
            return self.scores.get(flat[idx])

        # The descent asks synchronously; each pass runs what it asked for, then asks again
        # with the answers, until it asks for nothing new.
        while True:
            pending.clear()
            descent_order([len(v) for _, v in sweep.axes], value_of, self.ask.max_points)
            new = [flat[idx] for idx in dict.fromkeys(pending) if flat[idx] not in self.scores]
            if not new:
                return
            for i in new:
                if not await self.run(i, deadline):
                    return

    def ranked(self) -> list[str]:
        done = {i: v for i, v in self.scores.items() if v is not None}
        order = sorted(done, key=lambda i: (-done[i], i))
        return [self.plan.arms[i].name for i in order]


async def _verify(
    ask: TuneAsk, ranked: list[str], opts: RunOptions, root: Path,
    hooks: Hooks, seed: int, manifest: _TuneManifest,
) -> None:  # fmt: skip
    """The top `ask.verify` points as a sweep of the server, VERIFY_BOOTS boots per arm."""
    sweep = ask.real.sweep
    assert sweep is not None
    top = ranked[: ask.verify]
    arms: tuple[SweepArm, ...] = tuple(a for n in top for a in sweep.arms if a.name == n)
    chosen = dataclasses.replace(sweep, arms=arms, boots_per_arm=VERIFY_BOOTS)
    real = dataclasses.replace(ask.real, sweep=chosen)
    spec = opts.server
    assert spec is not None, "--verify names a launched server"
    commands = {
        a.name: launch_flags(spec.args, flag_args(profile_for(spec, a.flags), a.flags))
        for a in arms
    }
    manifest.config["server_args"] = {"kind": spec.kind, "arms": commands}
    manifest.save()
    hooks.say(f"verify: {', '.join(top)} on the server, {VERIFY_BOOTS} boots each")
    out = dataclasses.replace(opts, out_root=root, run_seed=seed)
    await run_plan(plan(real, run_seed=seed), out, hooks.warn, name=VERIFY)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"
