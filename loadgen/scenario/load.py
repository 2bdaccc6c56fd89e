"""Loading a scenario: find the file, parse it with line numbers, apply `--set` overrides,
validate everything and resolve the sweep. Every problem is reported at once, one line each:
`file:line: field.path: what is wrong (expected ...)`; nothing raises but ScenarioError.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from loadgen.scenario.checks import Checker, did_you_mean, integer, show
from loadgen.scenario.limits import arms_problem, size_problems
from loadgen.scenario.marked_yaml import (
    MarkedList,
    MarkedMap,
    ScenarioError,
    apply_override,
    parse_marked,
    parse_override,
)
from loadgen.scenario.model import SERVER_FLAGS, Scenario, Sweep, SweepArm
from loadgen.scenario.schema import build_scenario
from loadgen.scenario.schema_blocks import SWEEP_RULES

__all__ = ["ScenarioError", "load_scenario", "load_tree", "resolve_scenario_path", "scenario_dirs"]

SCENARIOS_ENV = "LOADGEN_SCENARIOS"
REPO_SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def scenario_dirs() -> list[Path]:
    """Where bare names are looked up: $LOADGEN_SCENARIOS (os.pathsep-separated), then the
    repository's scenarios/ folder."""
    extra = [Path(p) for p in os.environ.get(SCENARIOS_ENV, "").split(os.pathsep) if p]
    return [*extra, REPO_SCENARIOS]


def resolve_scenario_path(path_or_name: str | Path) -> Path:
    """An existing file as given, else a bare name as <dir>/<name>.yaml in scenario_dirs()."""
    path = Path(path_or_name)
    if path.is_file():
        return path
    if path.suffix or len(path.parts) > 1:
        raise ScenarioError([f"{path}: no such scenario file"])
    for folder in scenario_dirs():
        for suffix in (".yaml", ".yml"):
            candidate = folder / f"{path_or_name}{suffix}"
            if candidate.is_file():
                return candidate
    known = sorted({p.stem for d in scenario_dirs() if d.is_dir() for p in d.glob("*.y*ml")})
    looked = ", ".join(str(d) for d in scenario_dirs())
    raise ScenarioError(
        [f"{path_or_name}: no such scenario (looked in {looked}; known: {', '.join(known)})"]
    )


def load_scenario(
    path_or_name: str | Path, overrides: Iterable[str] = (), *, allow_files_outside: bool = False
) -> Scenario:
    """The validated scenario; raises ScenarioError listing every problem. Prompt files must
    lie inside the scenario's folder unless `allow_files_outside`."""
    path = resolve_scenario_path(path_or_name)
    display = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError([f"{display}: cannot read ({exc})"]) from None
    root = parse_marked(text, display)
    return load_tree(root, path.resolve(), display, overrides,
                     allow_files_outside=allow_files_outside)  # fmt: skip


def load_tree(
    root: Any,
    source: Path,
    display: str,
    overrides: Iterable[str] = (),
    *,
    allow_files_outside: bool = False,
) -> Scenario:
    """The validated scenario of a parsed tree (a file's, or one a command built, each value
    marked with where it came from); `source` is the path relative files resolve against.
    Raises ScenarioError listing every problem, as load_scenario does."""
    c = Checker(allow_files_outside=allow_files_outside)
    if isinstance(root, MarkedMap):
        _apply_overrides(c, root, overrides)
    scenario = build_scenario(root, source, display, c)
    sweep = _sweep(c, root, source, display, scenario) if _has_sweep(root) else None
    if c.errors or scenario is None:
        raise ScenarioError(c.sorted_lines())
    arms = [arm.scenario for arm in sweep.arms] if sweep else [scenario]
    problems = size_problems(arms)
    if problems:
        raise ScenarioError([f"{display}: {p}" for p in problems])
    return dataclasses.replace(scenario, sweep=sweep)


def _has_sweep(root: Any) -> bool:
    return isinstance(root, MarkedMap) and root.get("sweep") is not None


def _apply_overrides(c: Checker, root: MarkedMap, overrides: Iterable[str]) -> None:
    for text in overrides:
        try:
            path, value, loc = parse_override(text)
        except ValueError as exc:
            c.errors.append((f"--set {text}", str(exc)))
            continue
        problem = apply_override(root, path, value, loc)
        if problem:
            c.errors.append((loc, problem))


def _sweep(
    c: Checker, root: MarkedMap, source: Path, display: str, base: Scenario | None
) -> Sweep | None:
    m = c.mapping(root, "sweep", "")
    boots = c.field(m, "boots_per_arm", "sweep", integer(1, nullable=True), None)
    axes: list[tuple[str, tuple[Any, ...], list[str]]] = []
    for key, values in m.items():
        path = f"sweep.{key}"
        if key == "boots_per_arm" or not _axis_known(c, m, key, path):
            continue
        if not isinstance(values, MarkedList) or not values:
            c.add(m.value_locs[key], path, f"got {show(values)} (expected a non-empty list)")
            continue
        rule = SWEEP_RULES.get(key)
        for i, value in enumerate(values):
            if rule and not rule.accepts(value):
                c.bad(values.item_locs[i], f"{path}[{i}]", value, rule)
        axes.append((key, tuple(values), values.item_locs))
    if not axes and set(m) <= {"boots_per_arm"}:
        c.add(m.loc, "sweep", "no axes (expected at least one server flag or --set path)")
    too_many = arms_problem([len(values) for _, values, _ in axes])
    if too_many:
        c.add(m.loc, "sweep", too_many)
    if base is None or too_many:
        return None
    # Past a bad flag value the --set paths are still tried, so every error shows at once.
    tried = [a for a in axes if "." in a[0]] if c.errors else axes
    arms = tuple(_arm(c, root, source, display, point) for point in _points(tried)) if tried else ()
    if c.errors:
        return None
    return Sweep(tuple((k, v) for k, v, _ in axes), arms, boots)


def _axis_known(c: Checker, m: MarkedMap, key: Any, path: str) -> bool:
    """A dotted key is a client-side path (judged when applied); any other must be a flag."""
    # A key starting with "-" is a literal flag of the launched server (`-ub`, `--fault`).
    if isinstance(key, str) and ("." in key or key in SERVER_FLAGS or key.startswith("-")):
        return True
    choices = ("boots_per_arm", *SERVER_FLAGS)
    expect = f"boots_per_arm, a server flag ({', '.join(SERVER_FLAGS)}) or a dotted --set path"
    c.add(m.key_locs[key], path, f"unknown key (expected {expect}{did_you_mean(key, choices)})")
    return False


def _points(axes: list[tuple[str, tuple[Any, ...], list[str]]]) -> Iterator[tuple]:
    """Every combination of axis values as ((key, value, loc), ...), first axis slowest."""
    per_axis = [[(k, v, loc) for v, loc in zip(vals, locs, strict=True)] for k, vals, locs in axes]
    return itertools.product(*per_axis)


def _arm(c: Checker, root: MarkedMap, source: Path, display: str, point: tuple) -> SweepArm:
    """The arm at one point of the sweep: client-side values applied to a copy of the tree and
    validated, each error located at the sweep value that caused it."""
    name = ",".join(f"{key}={_label(value)}" for key, value, _ in point)
    flags = {key: value for key, value, _ in point if "." not in key}
    settings = {key: value for key, value, _ in point if "." in key}
    tree = copy.deepcopy(root)
    del tree["sweep"]
    for key, value, loc in point:
        if "." in key:
            problem = apply_override(tree, key, copy.deepcopy(value), loc)
            if problem:
                c.errors.append((loc, problem))
    scenario = build_scenario(tree, source, display, c)
    return SweepArm(name, flags, settings, scenario)  # type: ignore[arg-type]


def _label(value: Any) -> str:
    return show(value).strip("'")
