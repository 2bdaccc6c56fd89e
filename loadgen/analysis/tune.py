"""`loadgen tune`'s answer from its directory: each searched point of the server's flags scored
on the virtual clock (its objective, its figures, what binds it), ranked, and beside the top
points the server's own measurements, boot by boot, against the boot floor.

    TUNE/run.json        the search: scenario, profile, axes, objective, SLO, points in order
    TUNE/virtual/        a sweep directory: one arm per evaluated point, on the virtual clock
    TUNE/capacity/<pt>/  (--objective capacity) a capacity search per point, on the virtual clock
    TUNE/verify/         (--verify N) a sweep directory of the top N on the server, 2 boots each
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.analysis.bootfloor import arm_value, boot_floor
from loadgen.analysis.capacity import (
    analyze_capacity,
    binding_cause,
    judged_rows,
    missed_rows,
    slo_items,
)
from loadgen.analysis.capacity_types import read_capacity
from loadgen.analysis.inputs import read_manifest
from loadgen.analysis.load_sweep import LoadRow, load_row, pareto_front
from loadgen.analysis.slo import SloItem
from loadgen.analysis.summary import Analysis, analyze_run
from loadgen.analysis.sweep import analyze_sweep
from loadgen.codec import from_json, to_json
from loadgen.run_manifest import RunManifest

# What each objective reads from a point's load row; higher is better for every one.
# `capacity` is the capacity search's answer (the largest load meeting the SLO), not a row's.
OBJECTIVES = {
    "goodput": "goodput_req_s",
    "throughput": "output_tok_s",
    "capacity": "capacity",
}
# The figures a verified point's prediction is held to, with its objective's.
FIGURES = ("goodput_req_s", "output_tok_s", "ttft_p90_ms", "tpot_p90_ms")
MEETS = "meets"
VIRTUAL, VERIFY, CAPACITY = "virtual", "verify", "capacity"


@dataclass(frozen=True, slots=True)
class TunePoint:
    """One evaluated point: its flags, objective, load row and what binds it (`meets` when every
    stream met the SLO; else binding_cause's cause over the streams that missed)."""

    arm: str
    flags: dict[str, Any]
    objective: float | None
    row: LoadRow
    binding: str
    verdicts: dict[str, int]
    on_front: bool


@dataclass(frozen=True, slots=True)
class VerifiedPoint:
    """A top point run on the server: each boot's figures, and the prediction beside them."""

    arm: str
    predicted: dict[str, float | None]
    boots: tuple[dict[str, float | None], ...]

    def measured(self, figure: str) -> float | None:
        """The mean over boots (bootfloor's arm value)."""
        return arm_value([b.get(figure) for b in self.boots])

    def error(self, figure: str) -> float | None:
        """predicted / measured - 1, as fidelity writes it."""
        p, m = self.predicted.get(figure), self.measured(figure)
        return None if p is None or not m else p / m - 1


@dataclass(frozen=True, slots=True)
class Verification:
    """Predicted best against measured best: `holds` when the measured objective of the
    predicted best is within the boot floor of the best measured one."""

    points: tuple[VerifiedPoint, ...]
    predicted_best: str
    measured_best: str | None
    floor: float | None
    gap: float | None
    holds: bool | None


@dataclass(frozen=True, slots=True)
class TuneSummary:
    scenario: str
    objective: str
    slo: tuple[SloItem, ...]
    axes: tuple[tuple[str, tuple[Any, ...]], ...]
    method: str
    grid_points: int
    stopped_by: str | None
    profile: dict[str, Any]
    ranking: tuple[TunePoint, ...]
    verification: Verification | None
    server_command: str | None

    @property
    def pick(self) -> TunePoint | None:
        return self.ranking[0] if self.ranking else None


def is_tune(manifest: RunManifest) -> bool:
    return manifest.tune is not None


def read_tune(summary: Mapping[str, Any]) -> TuneSummary:
    return from_json(TuneSummary, summary["tune"])


def score(summary: dict[str, Any], objective: str) -> float | None:
    """A point's objective from its own summary."""
    value: float | None = getattr(load_row(summary), OBJECTIVES[objective])
    return value


def binding(
    summary: dict[str, Any], slo: Sequence[SloItem], arm: str
) -> tuple[str, dict[str, int]]:
    """What binds a point: `meets`, or the missed streams' cause with their verdict counts."""
    missed = missed_rows(judged_rows(summary, None), slo)
    if not missed:
        return MEETS, {}
    cause = binding_cause(missed, summary, arm, slo)
    return str(cause["cause"]), dict(cause["evidence"]["verdicts"])


def sweep_point(
    name: str, flags: dict[str, Any], summary: dict[str, Any], objective: str,
    slo: Sequence[SloItem],
) -> TunePoint:  # fmt: skip
    """A point run once at the scenario's own load."""
    cause, verdicts = binding(summary, slo, name)
    return TunePoint(name, flags, score(summary, objective), load_row(summary), cause, verdicts,
                     False)  # fmt: skip


def capacity_point(name: str, flags: dict[str, Any], path: Path) -> TunePoint:
    """A point scored by its capacity search: the largest load meeting the SLO, the figures of
    the step run at it (else the first step's), and what binds at the first failing load
    (`meets` where the SLO held at --max)."""
    summary, steps = analyze_capacity(path)
    c = read_capacity(summary)
    rows = {p["dir"]: p["value"] for p in summary["capacity"]["steps"]}
    at = [n for n, v in rows.items() if v == c.capacity] or list(rows)
    row = load_row(steps[at[0]].summary)
    if c.boundary is None:
        cause, verdicts = (MEETS if c.ended == "holds_at_max" else c.ended), {}
    else:
        cause, verdicts = str(c.boundary.cause), dict(c.boundary.evidence.verdicts)
    return TunePoint(name, flags, c.capacity, row, cause, verdicts, False)


def ranked(points: Sequence[TunePoint]) -> tuple[TunePoint, ...]:
    """Every point, best objective first (a point without one last; ties in search order),
    each marked where it is on the Pareto front of tok/s per user against output tok/s."""
    rows = {p.arm: (p.row.tok_s_per_user, p.row.output_tok_s) for p in points}
    front = set(pareto_front(rows))
    order = [p.arm for p in points]
    marked = [dataclasses.replace(p, on_front=p.arm in front) for p in points]
    return tuple(
        sorted(marked, key=lambda p: (p.objective is None, -(p.objective or 0), order.index(p.arm)))
    )


def figures(row: LoadRow) -> dict[str, float | None]:
    return {f: getattr(row, f) for f in FIGURES}


def verification(root: Path, ranking: Sequence[TunePoint], objective: str) -> Verification | None:
    """The verify sweep's boots per arm against the ranking's predictions; None without one."""
    verify = root / VERIFY
    if not (verify / "arms").is_dir():
        return None
    by_arm: dict[str, list[dict[str, float | None]]] = {}
    for boot in read_manifest(verify).boots or ():
        for run in boot.get("runs") or []:
            path = verify / str(run["dir"])
            if (path / "streams.jsonl").is_file():
                row = load_row(analyze_run(path).summary)
                by_arm.setdefault(str(run["arm"]), []).append(figures(row))
    predicted = {p.arm: p for p in ranking}
    points = tuple(
        VerifiedPoint(arm, figures(predicted[arm].row), tuple(boots))
        for arm, boots in by_arm.items()
        if arm in predicted
    )
    return verdict(points, [p.arm for p in ranking], objective) if points else None


def verdict(
    points: tuple[VerifiedPoint, ...], ranked: Sequence[str], objective: str
) -> Verification:
    """Is the predicted best (the first of `ranked` that was verified) the measured best within
    the boot floor of the objective?"""
    key = OBJECTIVES[objective]
    measured = {p.arm: p.measured(key) for p in points}
    # A point no stream of which met the SLO has no relative spread; the floor is the others'.
    floor = boot_floor({p.arm: [b.get(key) for b in p.boots] for p in points if measured[p.arm]})
    known = {a: v for a, v in measured.items() if v is not None}
    best = max(known, key=lambda a: known[a]) if known else None
    top = next(a for a in ranked if a in measured)
    gap = None
    if best is not None and measured[top] is not None and known[best]:
        gap = 1 - (measured[top] or 0.0) / known[best]
    holds = None if gap is None or floor is None else gap <= floor
    return Verification(points, top, best, floor, gap, holds)


def server_command(
    server_args: Mapping[str, Any] | None, checked: Verification | None
) -> str | None:
    """The launched server's arguments for the point to use: the predicted best where the
    server agreed within the floor (or could not tell apart), else the measured best."""
    if not server_args or checked is None:
        return None
    use = checked.predicted_best
    if checked.holds is False and checked.measured_best is not None:
        use = checked.measured_best
    args = server_args["arms"].get(use)
    return None if args is None else f"{server_args['kind']}: " + " ".join(map(str, args))


def analyze_tune(root: Path) -> tuple[dict[str, Any], dict[str, Analysis]]:
    """summary.json's `tune` block and each virtual point's analysis."""
    config = read_manifest(root).tune
    assert config is not None, "is_tune chose this directory"
    slo, objective = slo_items(config), config["objective"]
    points = [(str(p["name"]), dict(p["flags"])) for p in config["points"]]
    arms: dict[str, Analysis] = {}
    if objective == "capacity":
        found = [(n, f, root / CAPACITY / n) for n, f in points]
        scored = [capacity_point(n, f, next(d.iterdir())) for n, f, d in found if d.is_dir()]
    else:
        _, arms = analyze_sweep(root / VIRTUAL)
        scored = [
            sweep_point(n, f, arms[n].summary, objective, slo) for n, f in points if n in arms
        ]
    ranking = ranked(scored)
    checked = verification(root, ranking, objective)
    tune = TuneSummary(
        scenario=config["scenario"],
        objective=objective,
        slo=slo,
        axes=tuple((str(k), tuple(v)) for k, v in config["axes"]),
        method=config["method"],
        grid_points=config["grid_points"],
        stopped_by=config.get("stopped_by"),
        profile=config["profile"],
        ranking=ranking,
        verification=checked,
        server_command=server_command(config.get("server_args"), checked),
    )
    return {"tune": to_json(tune)}, arms
