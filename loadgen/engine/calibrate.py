"""`loadgen calibrate` on a target: analysis/calibration.py's points, one after another, each an
ordinary run into RUN/points/<order>-<point>/, on one server (the URL, one boot of the launched
server, or the virtual clock's fresh engine per point), then the fit and the profile file.

The first point (the TTFT floor) also shows whether the server can be driven at all (it
streams, it reports usage) and which limits it states (budget, seats, block size, window:
boot log, flags, /metrics or --server-facts); the rest of the plan is sized from those. The
plan is bounded before anything is sent (requests) and while it runs (the points' wall
seconds, each boot its share: boot_allowances); run.json lists each point as it ends, so a
stopped calibration keeps what it measured.

A server loadgen boots (--server KIND, or the virtual clock's engine) is booted again at each
of --budgets (default: a quarter of the first boot's budget) for the cold prefills alone: at
one budget a prefill's steps grow with its tokens, so a prefill step's cost and a prefill
token's are one slope; at two they come apart. Each point is fitted with its own boot's shape.
The profile lists the boots (fitted_boots: flags, limits, eager or graph steps, the costs each
measured) and the costs the points could not separate (unseparated; by URL, one boot).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen import __version__
from loadgen.analysis.calibration import (
    WITNESS_COUNTERS,
    Measurement,
    PlanLimits,
    Point,
    ServerShape,
    Speculation,
    TtftWitness,
    calibration_plan,
    counter_deltas,
    measure,
    speculation,
    speculation_from_counters,
    ttft_witness,
)
from loadgen.analysis.calibration_fit import Fit, costs_measured, fit_costs, unseparated
from loadgen.analysis.inputs import RunInputs, load_run, read_manifest
from loadgen.codec import to_json
from loadgen.engine.backends import clock_of, shared_target
from loadgen.engine.options import RunOptions
from loadgen.engine.run import Hooks, base_manifest, open_work_root, run_arm
from loadgen.engine.target import RunError, Target
from loadgen.records import StreamRecord
from loadgen.run_manifest import RunManifest, TargetInfo, write_manifest
from loadgen.scenario.model import Group, PromptConfig, Scenario
from loadgen.scenario.plan import derive_seed, plan
from loadgen.server.kinds import KINDS, kind_profile
from loadgen.sim.profile_file import FittedProfile, load_profile_file, write_profile_file
from loadgen.sim.profiles import StepProfile

# Facts the plan cannot be sized without.
NEEDED = ("max_num_batched_tokens", "max_num_seqs", "max_model_len")
# A server without paged blocks (llama.cpp reuses a slot's prefix token by token) states none;
# the plan then sizes its cached tails as the sim's default block would, and the profile
# leaves the block size to the sim.
UNSTATED_BLOCK = 16
# What a profile carries of the server's facts, when the server stated them.
CARRIED = ("max_num_seqs", "max_num_batched_tokens", "block_size", "num_gpu_blocks",
           "max_model_len")  # fmt: skip
USAGE_SOURCES = ("usage_continuous", "usage_final", "server_counter")


@dataclass(frozen=True, slots=True)
class CalibrateRequest:
    """What to calibrate and within which bounds."""

    base: Scenario
    limits: PlanLimits
    max_requests: int
    max_time_s: float
    out: Path | None = None
    name: str | None = None
    hardware: str | None = None
    # Budgets of the boots after the first (None: calibrate's own choice, _extra_budgets).
    budgets: tuple[int, ...] | None = None


async def calibrate(req: CalibrateRequest, opts: RunOptions, hooks: Hooks) -> Path:
    """Runs the plan and writes the profile; returns the calibration's directory."""
    if req.budgets and not restartable(opts):
        raise RunError(
            f"--budgets needs a server loadgen launches (--server KIND): it cannot restart "
            f"{opts.base_url}; by URL the profile lists the costs one boot leaves unseparated"
        )
    work = open_work_root(req.base, opts, hooks.on_root)
    warn, say = hooks.warn, hooks.say
    root, started, seed = work.path, work.started, work.seed
    manifest = base_manifest(plan(req.base, run_seed=seed), opts, started).add(
        calibrate={"limits": dataclasses.asdict(req.limits),
                   "max_requests": req.max_requests, "max_time_s": req.max_time_s},
        runs=(), boots=(), interrupted=True,
    )  # fmt: skip
    write_manifest(root, manifest)
    run = _BootRun(req, opts, warn, say, root, seed, manifest)
    async with shared_target(req.base, opts, root, warn) as target:
        shape, first = await run.boot(target, {}, lambda shape: shape)
    for i, budget in enumerate(_extra_budgets(req, opts, shape), start=1):
        flags = {"max_num_batched_tokens": budget}
        async with shared_target(req.base, opts, root, warn, flags=flags,
                                 log_name=f"boot-{i + 1}") as target:  # fmt: skip
            await run.boot(target, flags, _prefills_only)
    _fit_and_write(root, run.manifest, run.ran, first, req.out, _Naming(req.name, req.hardware))
    return root


def restartable(opts: RunOptions) -> bool:
    """loadgen boots the server (or the virtual clock its engine), so it can boot it again at
    other flags; a URL's server it cannot."""
    return opts.base_url is None and (opts.server is not None or clock_of(opts).engine_per_arm)


def _extra_budgets(req: CalibrateRequest, opts: RunOptions, shape: ServerShape) -> tuple[int, ...]:
    """The budgets of the boots after the first: --budgets, else a quarter of the first
    boot's, which prices the same prefills in four times the steps (per-step apart from
    per-token); none by URL."""
    if req.budgets is not None:
        return tuple(b for b in req.budgets if b != shape.budget)
    if not restartable(opts):
        return ()
    return (max(shape.budget // 4, MIN_BUDGET),)


# The smallest budget an extra boot asks for: below a block or two of tokens the server
# refuses to boot or the prefill points run out of --max-requests.
MIN_BUDGET = 128


def _prefills_only(points: tuple[Point, ...]) -> tuple[Point, ...]:
    """A boot after the first measures what its budget changes: the cold prefills' steps."""
    return tuple(p for p in points if p.kind == "ttft")


def boot_allowances(requests: Sequence[int], max_time_s: float) -> list[float]:
    """The point seconds each boot may have used by its end: --max-time split by the boots'
    planned requests, cumulatively (what a boot leaves, the next may use). On the H200 one
    deadline over all boots let the first boot's decode points spend it, and the second boot,
    booted for the cold prefills at a quarter budget, ran one point of seven."""
    total = sum(requests)
    if total <= 0:
        return [max_time_s for _ in requests]
    shares, done = [], 0
    for n in requests:
        done += n
        shares.append(max_time_s * done / total)
    return shares


# Point seconds are read off this clock (a seam the tests replace).
_now = time.monotonic


@dataclass
class _BootRun:
    """The points of every boot, run one after another; --max-time counts the points' own
    seconds (a server's boot is not a point), split among the boots by boot_allowances."""

    req: CalibrateRequest
    opts: RunOptions
    warn: Callable[[str], None]
    say: Callable[[str], None]
    root: Path
    seed: int
    manifest: RunManifest
    spent_s: float = 0.0
    allowances: list[float] = dataclasses.field(default_factory=list)
    ran: list[tuple[Point, list[StreamRecord], int]] = dataclasses.field(default_factory=list)

    async def boot(
        self,
        target: Target | None,
        flags: dict[str, Any],
        choose: Callable[[tuple[Point, ...]], tuple[Point, ...]],
    ) -> tuple[ServerShape, RunManifest]:
        """One boot's points (the TTFT floor first: it learns the boot's limits); returns the
        boot's shape and its first point's manifest."""
        index = len(self.manifest.boots or ())
        tag = "" if index == 0 else f"@boot{index + 1}"
        tiny = calibration_plan(_PROVISIONAL, self.req.limits)[0]
        first_dir = await self._point(tiny, tag, flags, target, index)
        _check_drivable(self.ran[-1][1], self.opts)
        shape, first = _server_shape(self.root / first_dir)
        boot = _boot_record(first, first_dir)
        self.manifest = self.manifest.add(boots=(*(self.manifest.boots or ()), boot))
        write_manifest(self.root, self.manifest)
        points = choose(calibration_plan(shape, self.req.limits))
        _check_bounds(points, self.req.max_requests)
        if index == 0:
            self.allowances = self._allowances(shape, points)
        allowance = self.allowances[min(index, len(self.allowances) - 1)]
        self.say(f"calibrate boot {index + 1}: {len(points)} points, "
                 f"{sum(p.requests for p in points)} requests, until {allowance:.0f} of "
                 f"{self.req.max_time_s:g} point seconds; the server: budget {shape.budget}, "
                 f"seats {shape.seats}, block {shape.block_size}, "
                 f"window {shape.max_model_len}")  # fmt: skip
        self.say(_point_line(1, len(points), tiny, measure(tiny, self.ran[-1][1], shape)))
        for order, point in enumerate(points[1:], start=2):
            if self.spent_s > allowance:
                stopped = f"--max-time {self.req.max_time_s:g} s (boot {index + 1})"
                self.manifest = self.manifest.add(stopped_by=stopped)
                self.say(f"calibrate: boot {index + 1}'s share of --max-time "
                         f"{self.req.max_time_s:g} s reached ({allowance:.0f} s); "
                         "fitting what ran")  # fmt: skip
                break
            await self._point(point, tag, flags, target, index)
            self.say(_point_line(order, len(points), point,
                                 measure(point, self.ran[-1][1], shape)))  # fmt: skip
        return shape, first

    def _allowances(self, shape: ServerShape, points: tuple[Point, ...]) -> list[float]:
        """Each boot's allowance, the later boots' requests planned at the first's shape."""
        later = sum(p.requests for p in _prefills_only(calibration_plan(shape, self.req.limits)))
        extra = _extra_budgets(self.req, self.opts, shape)
        requests = [sum(p.requests for p in points), *(later for _ in extra)]
        return boot_allowances(requests, self.req.max_time_s)

    async def _point(
        self, point: Point, tag: str, flags: dict[str, Any], target: Target | None, boot: int
    ) -> str:
        order = len(self.manifest.runs or ()) + 1
        named = dataclasses.replace(point, name=point.name + tag)
        started = _now()
        rel = await _run_point(self.req.base, named, order, self.seed, self.root, self.opts,
                               self.warn, target, flags)  # fmt: skip
        self.spent_s += _now() - started
        listed = {"name": named.name, "dir": rel, "boot": boot}
        self.manifest = self.manifest.add(runs=(*(self.manifest.runs or ()), listed))
        write_manifest(self.root, self.manifest)
        self.ran.append((named, _measured(self.root / rel), boot))
        return rel


def _boot_record(first: RunManifest, first_dir: str) -> dict[str, Any]:
    """A boot as run.json and the profile's fitted_boots list it: its flags, the limits it
    stated, whether its steps ran eager or as CUDA graphs (vLLM), its first point."""
    target = first.target if isinstance(first.target, TargetInfo) else None
    server = first.server or {}
    flags = list(target.flags) if target is not None else []
    return {
        "flags": flags,
        "max_num_batched_tokens": server.get("max_num_batched_tokens"),
        "max_num_seqs": server.get("max_num_seqs"),
        "mode": step_mode(target.kind if target is not None else "", flags),
        "first": first_dir,
    }


def step_mode(kind: str, flags: Sequence[str | int | float | bool]) -> str | None:
    """vLLM steps eagerly with --enforce-eager, else replays CUDA graphs (a decode floor of
    kernel launches only the eager mode has); None where the server has no such mode."""
    if kind != "vllm":
        return None
    return "eager" if "--enforce-eager" in flags else "graph"


@dataclass(frozen=True, slots=True)
class _Naming:
    name: str | None
    hardware: str | None


def refit(root: Path, out: Path | None, name: str | None, hardware: str | None) -> Path:
    """Fits a calibration's recorded points again (no server: analysis of the records), e.g.
    after the model gained a term; writes the profile; returns `root`."""
    manifest = read_manifest(root)
    if manifest.calibrate is None or not manifest.runs:
        raise RunError(f"{root}: not a calibration directory (run.json lists no runs)")
    if (root / "profile.yaml").is_file():
        # What the first fit was told of the server stands unless this call says otherwise.
        before = load_profile_file(root / "profile.yaml")
        name = name or before.name
        hardware = hardware or before.fitted_on.get("hardware")
    limits = PlanLimits(**(manifest.calibrate or {})["limits"])
    points = manifest.runs
    # A calibration from before multi-boot runs had one boot, its first point the first.
    boots = manifest.boots or (_boot_record(read_manifest(root / points[0]["dir"]),
                                            points[0]["dir"]),)  # fmt: skip
    planned: dict[str, Point] = {}
    for i, boot in enumerate(boots):
        tag = "" if i == 0 else f"@boot{i + 1}"
        shape, _ = _server_shape(root / boot["first"])
        planned |= {p.name + tag: dataclasses.replace(p, name=p.name + tag)
                    for p in calibration_plan(shape, limits)}  # fmt: skip
    ran = [(planned[p["name"]], _measured(root / p["dir"]), p.get("boot", 0))
           for p in points]  # fmt: skip
    first = read_manifest(root / boots[0]["first"])
    _fit_and_write(root, manifest.add(boots=boots), ran, first, out, _Naming(name, hardware))
    return root


def _fit_and_write(
    root: Path,
    manifest: RunManifest,
    ran: list[tuple[Point, list[StreamRecord], int]],
    first: RunManifest,
    out: Path | None,
    naming: _Naming,
) -> None:
    # Drafts are known only once every decode point ran; the decode rows price them.
    boots = manifest.boots or ()
    # Each point's run read once: its counters serve the speculation and the TTFT witness.
    runs = [load_run(root / p["dir"]) for p in manifest.runs or ()]
    spec = _speculation(runs, [(p, r) for p, r, _ in ran], first.target)
    shapes = [dataclasses.replace(_server_shape(root / b["first"])[0], spec_tokens=spec.tokens)
              for b in boots]  # fmt: skip
    measured = [m for p, recs, boot in ran if (m := measure(p, recs, shapes[boot])) is not None]
    boot_of = {p.name: boot for p, _, boot in ran}
    fit = fit_costs(measured)
    started = dt.datetime.fromisoformat(manifest.started_wall or "")
    fitted_boots = [{k: v for k, v in b.items() if k != "first"}
                    | {"costs": list(costs_measured([m for m in measured
                                                     if boot_of[m.point] == i]))}
                    for i, b in enumerate(boots)]  # fmt: skip
    profile = _profile(naming, str(manifest.clock), first, shape=shapes[0], fit=fit,
                       spec=spec, started=started, prefix_caching=_prefix_caching(measured),
                       witnesses=_witnesses(runs, [p for p, _, _ in ran]),
                       boots=fitted_boots,
                       unseparated=unseparated(measured, fit.min_step_s))  # fmt: skip
    path = out or root / "profile.yaml"
    write_profile_file(path, profile)
    if path != root / "profile.yaml":
        write_profile_file(root / "profile.yaml", profile)
    fitted = manifest.add(interrupted=False, profile=str(path), fit=to_json(fit.summary()))
    write_manifest(root, fitted)


# The fit is the client's timing: the virtual clock must reproduce what a client sees, HTTP
# path included. The server's counters stand beside it as a witness of the model's schedule.
WITNESS_SOURCE = ("server counters beside the fit: vllm:time_to_first_token_seconds over each "
                  "point's run against the client's TTFTs of the same requests")  # fmt: skip
WITNESS_NONE = "none: /metrics has no TTFT histogram; client timing only"

# Sizes only the first point (the TTFT floor), which does not depend on the server.
_PROVISIONAL = ServerShape(budget=2048, seats=1, block_size=16, max_model_len=4096)


async def _run_point(
    base: Scenario,
    point: Point,
    order: int,
    seed: int,
    root: Path,
    opts: RunOptions,
    warn: Callable[[str], None],
    target: Target | None,
    flags: dict[str, Any],
) -> str:
    scenario = point_scenario(base, point)
    the_plan = plan(scenario, run_seed=derive_seed(seed, "calibrate", order))
    first = the_plan.arms[0]
    arm = dataclasses.replace(first, name=point.name, flags={**first.flags, **flags})
    rel = f"points/{order:02d}-{point.name}"
    await run_arm(the_plan, arm, root / rel, opts, warn, target=target)
    return rel


def point_scenario(base: Scenario, point: Point) -> Scenario:
    """`base` with its groups replaced by the point's one group, `reps` repetitions."""
    cache = "primed" if point.kind == "cached" else "salted"
    prompt = PromptConfig(point.prompt_tokens, "prose", cache,
                          prefix_tokens=point.prefix_tokens or None)  # fmt: skip
    group = Group("point", point.streams, prompt, point.max_tokens)
    return dataclasses.replace(base, groups=(group,), repetitions=point.reps, sweep=None)


def _measured(run_dir: Path) -> list[StreamRecord]:
    return [r for r in load_run(run_dir).streams if r.phase == "measure"]


def _server_shape(run_dir: Path) -> tuple[ServerShape, RunManifest]:
    """The server's limits as the first point's run learned them (with the run's manifest);
    RunError naming the fix for one it does not state."""
    manifest = read_manifest(run_dir)
    server = manifest.server or {}
    missing = [k for k in NEEDED if not isinstance(server.get(k), int)]
    if missing:
        listed = ",".join(f"{k}=N" for k in missing)
        raise RunError(
            f"calibrate needs the server's {', '.join(missing)} (no flag, boot log or /metrics "
            f"stated it): pass --server-facts {listed}"
        )
    shape = ServerShape(
        budget=server["max_num_batched_tokens"], seats=server["max_num_seqs"],
        block_size=server.get("block_size") or UNSTATED_BLOCK,
        max_model_len=server["max_model_len"],
    )  # fmt: skip
    return shape, manifest


def _speculation(
    runs: Sequence[RunInputs],
    ran: list[tuple[Point, list[StreamRecord]]],
    target: TargetInfo | str | None,
) -> Speculation:
    """From the server's spec-decode counters over the decode points where it has them, else
    from the flags loadgen launched it with, else from the decode chunks' token counts."""
    decode_runs = [run for run, (point, _) in zip(runs, ran, strict=True) if point.kind == "decode"]
    totals: dict[str, float] = {}
    for run in decode_runs:
        for name, rise in counter_deltas(run.metrics).items():
            totals[name] = totals.get(name, 0.0) + rise
    counted = speculation_from_counters(totals)
    if counted is not None:
        return counted
    launched = launched_without_drafts(target)
    if launched is not None:
        return launched
    return speculation(r for point, recs in ran if point.kind == "decode" for r in recs)


def launched_without_drafts(target: TargetInfo | str | None) -> Speculation | None:
    """No drafts where loadgen launched a server whose kind names its draft flags and none was
    given: the launch outranks the chunks, which a loaded server coalesces (vLLM's CPU build on
    a busy 2-core box sent enough two-token chunks to read as k = 1). None where it cannot say."""
    if not isinstance(target, TargetInfo) or target.boot_log is None or target.kind not in KINDS:
        return None
    prefix = kind_profile(target.kind).draft_flag_prefix
    if prefix is None or any(str(f).startswith(prefix) for f in target.flags):
        return None
    return Speculation(0, None, None, f"launched {target.kind} without a {prefix} flag")


def _witnesses(runs: Sequence[RunInputs], points: Sequence[Point]) -> list[TtftWitness]:
    """The server's own TTFT histogram over each point's run, where it has one."""
    out = []
    for run, point in zip(runs, points, strict=True):
        deltas = counter_deltas(run.metrics, WITNESS_COUNTERS)
        if (w := ttft_witness(point, run.streams, deltas)) is not None:
            out.append(w)
    return out


def _check_bounds(points: tuple[Point, ...], max_requests: int) -> None:
    total = sum(p.requests for p in points)
    if total > max_requests:
        raise RunError(
            f"the calibration plan sends {total} requests, above --max-requests {max_requests};"
            " raise it, or lower --reps or --max-prompt"
        )


def _check_drivable(records: list[StreamRecord], opts: RunOptions) -> None:
    """One line on why the server cannot be calibrated, from the first point's streams."""
    where = opts.base_url or "the launched server"
    failed = [r for r in records if r.status != "ok"]
    if not records or len(failed) == len(records):
        why = failed[0].error.message if failed and failed[0].error else "no stream ran"
        raise RunError(f"cannot calibrate {where}: its first request failed: {why}")
    untimed = [r for r in records if r.status == "ok" and r.t_first_ns is None]
    if untimed:
        raise RunError(f"cannot calibrate {where}: it streamed no content chunk")
    if any(r.token_source not in USAGE_SOURCES for r in records):
        raise RunError(
            f"cannot calibrate {where}: it reports no token usage "
            "(stream_options.include_usage); calibration counts tokens, not chunks"
        )


def _point_line(order: int, total: int, point: Point, m: Measurement | None) -> str:
    if m is None and point.kind == "decode":
        return (f"calibrate {order}/{total} {point.name}: not measured: no window where its "
                f"{point.streams} streams all decoded (a stream failed, or the server runs "
                "fewer at once)")  # fmt: skip
    if m is None:
        return f"calibrate {order}/{total} {point.name}: no stream finished"
    what = "decode step (mean gap)" if point.kind == "decode" else "TTFT (median)"
    return (
        f"calibrate {order}/{total} {point.name}: {what} {m.value_s * 1e3:.2f} ms "
        f"({m.samples} samples)"
    )


def _prefix_caching(measured: list[Measurement]) -> bool:
    """False only where the server reported its cached tokens and every cached point got none
    (an unreported count is taken as the full block-aligned prefix)."""
    cached = [m.basis["cached_tokens"] for m in measured if m.kind == "cached"]
    return not cached or any(n > 0 for n in cached)


def _profile(
    naming: _Naming,
    clock: str,
    first: RunManifest,
    *,
    shape: ServerShape,
    fit: Fit,
    spec: Speculation,
    started: dt.datetime,
    prefix_caching: bool,
    witnesses: list[TtftWitness],
    boots: list[dict[str, Any]],
    unseparated: tuple[str, ...],
) -> FittedProfile:
    """The profile file's content: fitted costs, the server's facts, what it was fitted on."""
    c = fit.costs
    target = first.target if isinstance(first.target, TargetInfo) else None
    kind = target.kind if target is not None else "server"
    name = naming.name or f"{kind}-{started.strftime('%Y%m%d')}"
    step = StepProfile(
        name, fixed_s=c["fixed_s"], per_token_s=c["per_token_s"],
        decode_ctx_s=c["decode_ctx_s"], prefill_ctx_s=c["prefill_ctx_s"],
        cached_token_s=c["cached_token_s"], decode_token_s=c["decode_token_s"],
        min_step_s=fit.min_step_s,
    )  # fmt: skip
    server = first.server or {}
    facts: dict[str, Any] = {k: server[k] for k in CARRIED if isinstance(server.get(k), int)}
    facts["enable_prefix_caching"] = prefix_caching
    facts["num_speculative_tokens"] = spec.tokens
    if spec.acceptance is not None:
        facts["acceptance_rate"] = spec.acceptance
    fitted_on = {
        "server": kind, "model": first.model, "flags": list(target.flags if target else ()),
        "url": target.url if target is not None and kind == "external" else None,
        "hardware": naming.hardware or _this_host(), "clock": clock,
        "date": started.isoformat(timespec="seconds"), "loadgen": __version__,
    }  # fmt: skip
    return FittedProfile(
        name=name, step=step, request_overhead_s=c["request_overhead_s"], facts=facts,
        fitted_on=fitted_on,
        sources={"timing": "client: send to first content chunk; content chunk gaps",
                 "tokens": "server usage", "facts": dict(server.get("sources") or {}),
                 "speculation": spec.source,
                 "server_counters": WITNESS_SOURCE if witnesses else WITNESS_NONE},
        fit=to_json(fit.summary()) | {"server_witness": [to_json(w) for w in witnesses]},
        measurements=tuple(fit.rows),
        fitted_boots=tuple(boots), unseparated=unseparated,
    )  # fmt: skip


def _this_host() -> str:
    return f"{platform.machine()} {os.cpu_count()} cores ({platform.node()})"
