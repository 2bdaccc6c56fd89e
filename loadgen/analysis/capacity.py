"""Capacity: the largest load whose SLO attainment meets its target, and what binds beyond it.

SLO items are analysis/slo.py's `metric_pNN=limit` (TTFT and E2E in s, TPOT in ms): at least
NN% of the judged streams must have the metric within the limit; a bare `metric=limit` takes
`--attain` as its share. A failed stream, or one without the metric (TPOT of a one-token
answer), misses every item. With nearest-rank percentiles, "attainment >= NN%" is exactly
"pNN <= limit".

The search (next_step, pure, from the history of steps) brackets upwards from `lo` by
doubling, bisects between the largest passing and the smallest failing load to the axis'
resolution (1 for concurrency, `rel_tol` of the value for a rate), then repeats the two
boundary loads until each has `repeats` runs. A load passes when its runs pooled meet every
item, so a repeat that fails moves the boundary down and bisection resumes. The answer is the
largest passing load below the smallest failing one, and the interval [answer, first fail).

The cause at the boundary: among the streams that missed an item at the first failing load,
the verdict most of them carry names what binds (DESIGN.md's vocabulary), with the evidence
that decided it (the cap and its source, the prefilling prompts, kv% and preemptions, the
client's own error); streams admitted promptly that still miss a TPOT or E2E item are
`decode_batch`: the batch's own step time, which no verdict blames on a wait; those that miss
on TTFT alone are `own_prefill`: their own prompt's prefill, which no batch size moves.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from loadgen.analysis.evidence import blamed_prefills, read_evidence
from loadgen.analysis.inputs import read_manifest
from loadgen.analysis.slo import METRICS, SloItem
from loadgen.analysis.stats import canonical, median
from loadgen.analysis.summary import MEASURE, SCHEMA, Analysis, analyze_run
from loadgen.codec import from_json, json_field, to_json
from loadgen.run_manifest import RunManifest
from loadgen.scenario.load_axis import format_load

DEFAULT_REPEATS = 2
DEFAULT_REL_TOL = 0.1
DEFAULT_MAX_STEPS = 24
# Verdicts that name a cause, in the order a tie is broken (a wait before a crawl).
CAUSES = ("admission_cap", "prefill_hol", "pool_pressure", "rationed_decode", "client_limited")


def judged_rows(summary: dict[str, Any], group: str | None) -> list[dict[str, Any]]:
    """The measured stream rows a step is judged on: `group`'s, or every group's."""
    return [
        s for s in summary["streams"]
        if s["phase"] == MEASURE and (group is None or s["group"] == group)
    ]  # fmt: skip


def within(row: dict[str, Any], item: SloItem) -> bool:
    field, factor, _ = METRICS[item.metric]
    value = row.get(field)
    return row["status"] == "ok" and value is not None and value <= item.limit * factor


def judge(rows: Sequence[dict[str, Any]], slo: Sequence[SloItem]) -> dict[str, Any]:
    """Per item: attainment and the measured percentile at the item's share; `passes` when every
    item's attainment reaches its share; `good` counts streams within every item."""
    items = {}
    for item in slo:
        n_within = sum(within(r, item) for r in rows)
        attainment = n_within / len(rows) if rows else 0.0
        items[item.name] = {
            "attainment": attainment,
            "value": _finite(nearest_rank([_value(r, item) for r in rows], item.share)),
            "passes": bool(rows) and attainment >= item.share,
        }
    good = sum(all(within(r, i) for i in slo) for r in rows)
    return {
        "n": len(rows),
        "good": good,
        "items": items,
        "passes": all(v["passes"] for v in items.values()),
    }


def _value(row: dict[str, Any], item: SloItem) -> float:
    """The row's metric in the item's unit; a failed or missing one is +inf (never within)."""
    field, factor, _ = METRICS[item.metric]
    value = row.get(field)
    return math.inf if row["status"] != "ok" or value is None else value / factor


def _finite(value: float | None) -> float | None:
    """JSON has no infinity: a percentile that falls on a missed stream is None."""
    return None if value is None or math.isinf(value) else value


def nearest_rank(values: list[float], share: float) -> float | None:
    """The nearest-rank percentile: the smallest value at least `share` of them are within."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


@dataclass(frozen=True, slots=True)
class Search:
    over: str  # concurrency | rate
    lo: float = json_field(key="min")
    hi: float = json_field(key="max")
    repeats: int = DEFAULT_REPEATS
    rel_tol: float = DEFAULT_REL_TOL
    # `max_probes` in run.json of a search written before steps had their name
    max_steps: int = json_field(default=DEFAULT_MAX_STEPS, legacy=("max_probes",))


def pooled(steps: Sequence[dict[str, Any]], value: float) -> list[dict[str, Any]]:
    return [p for p in steps if p["value"] == value]


def load_passes(steps: Sequence[dict[str, Any]], value: float, slo: Sequence[SloItem]) -> bool:
    """Whether the runs at `value`, their streams pooled, meet every item."""
    runs = pooled(steps, value)
    n = sum(p["n"] for p in runs)
    for item in slo:
        within_n = sum(p["items"][item.name]["attainment"] * p["n"] for p in runs)
        if n == 0 or within_n / n < item.share - 1e-12:
            return False
    return True


def boundary(
    steps: Sequence[dict[str, Any]], slo: Sequence[SloItem]
) -> tuple[float | None, float | None]:
    """(largest passing load below the smallest failing one, that smallest failing load)."""
    values = sorted({p["value"] for p in steps})
    fails = [v for v in values if not load_passes(steps, v, slo)]
    first_fail = fails[0] if fails else None
    passing = [
        v for v in values
        if load_passes(steps, v, slo) and (first_fail is None or v < first_fail)
    ]  # fmt: skip
    return (passing[-1] if passing else None), first_fail


def next_step(
    steps: Sequence[dict[str, Any]], search: Search, slo: Sequence[SloItem]
) -> float | None:
    """The next load to run, or None when the search is done or out of steps (module
    docstring)."""
    return None if len(steps) >= search.max_steps else _wanted_load(steps, search, slo)


def _wanted_load(
    steps: Sequence[dict[str, Any]], search: Search, slo: Sequence[SloItem]
) -> float | None:
    """The load the search would run next with steps to spare; None once it has its answer."""
    if not steps:
        return search.lo
    lo, hi = boundary(steps, slo)
    if hi is None:  # everything so far passes: go up, and confirm --max once it is reached
        assert lo is not None
        return _repeat(steps, (lo,), search) if lo >= search.hi else min(search.hi, _up(lo, search))
    if lo is None:  # the smallest load, search.lo, fails: confirm it, then stop
        return _repeat(steps, (hi,), search)
    if _gap_open(lo, hi, search):
        return _mid(lo, hi, search)
    return _repeat(steps, (lo, hi), search)


def _up(value: float, search: Search) -> float:
    return value * 2 if search.over == "rate" else float(int(value) * 2)


def _gap_open(lo: float, hi: float, search: Search) -> bool:
    if search.over == "concurrency":
        return hi - lo > 1
    return (hi - lo) > search.rel_tol * lo


def _mid(lo: float, hi: float, search: Search) -> float:
    if search.over == "concurrency":
        return float((int(lo) + int(hi)) // 2)
    return float(f"{(lo + hi) / 2:.4g}")


def _repeat(
    steps: Sequence[dict[str, Any]], values: Sequence[float], search: Search
) -> float | None:
    for v in values:
        if len(pooled(steps, v)) < search.repeats:
            return v
    return None


# How a search ended: it found its answer (`resolved`; `holds_at_max` where --max itself meets
# the SLO; `fails_at_min` where --min misses it), or something stopped it first (its steps ran
# out, or a Stop that run.json records).
Stop = Literal["max_time", "interrupted"]
Ended = Literal["resolved", "holds_at_max", "fails_at_min", "max_steps"] | Stop


def answer(
    steps: Sequence[dict[str, Any]],
    search: Search,
    slo: Sequence[SloItem],
    stopped: Stop | None = None,
) -> dict[str, Any]:
    """The capacity, its interval and how the search ended; `stopped` is what stopped the run
    before next_step ran out (run.json's record of it), if anything did."""
    lo, hi = boundary(steps, slo)
    ended: Ended
    if steps and _wanted_load(steps, search, slo) is None:
        ended = "holds_at_max" if hi is None else "fails_at_min" if lo is None else "resolved"
    elif stopped is not None:
        ended = stopped
    elif len(steps) >= search.max_steps:
        ended = "max_steps"
    else:
        ended = "interrupted"
    return {
        "capacity": lo,
        "interval": [lo, hi],
        "first_fail": hi,
        "ended": ended,
        "runs_at": {format_load(v): len(pooled(steps, v)) for v in (lo, hi) if v is not None},
    }


def missed_rows(rows: Sequence[dict[str, Any]], slo: Sequence[SloItem]) -> list[dict[str, Any]]:
    return [r for r in rows if not all(within(r, i) for i in slo)]


def binding_cause(
    missed: Sequence[dict[str, Any]], summary: dict[str, Any], load: str, slo: Sequence[SloItem]
) -> dict[str, Any]:
    """What binds at the first failing load (`load`, its label): the verdict most of the
    streams that missed carry, and the evidence that says what would move the boundary.
    Streams admitted without a wait to blame bind on their own prompt's prefill where most of
    them missed on TTFT alone (`own_prefill`: one seat, a 32k prompt), else on the batch's own
    step time (`decode_batch`)."""
    counts = Counter(r["verdict"] for r in missed)
    ranked = sorted(
        (v for v in counts if v in CAUSES or v in ("admitted", "unexplained", "error")),
        key=lambda v: (-counts[v], CAUSES.index(v) if v in CAUSES else len(CAUSES)),
    )
    verdict = ranked[0] if ranked else None
    cause = verdict
    if verdict in ("admitted", "unexplained"):
        prompt_only = [r for r in missed if r["verdict"] == verdict and _missed_ttft_alone(r, slo)]
        cause = "own_prefill" if 2 * len(prompt_only) > counts[verdict] else "decode_batch"
    run = summary["run"]
    server = run.get("server") or {}
    evidence: dict[str, Any] = {"verdicts": dict(sorted(counts.items())), "missed": len(missed)}
    facts = run.get("server_facts") or {}
    budget = {"max_num_batched_tokens": facts.get("max_num_batched_tokens")}
    if cause == "admission_cap":
        cap = run.get("cap") or {}
        evidence |= {"cap": cap.get("value"), "cap_source": cap.get("source")}
    elif cause == "prefill_hol":
        ahead = Counter(
            p for r in missed for p in blamed_prefills(read_evidence(r["verdict"], r["evidence"]))
        )
        evidence |= {"prefilling": _prefilling_prompts(summary, list(ahead))} | budget
    elif cause == "pool_pressure":
        evidence |= {"kv_peak_perc": server.get("kv_peak_perc"),
                     "preemptions": server.get("preemptions"),
                     "num_gpu_blocks": facts.get("num_gpu_blocks")}  # fmt: skip
    elif cause == "rationed_decode":
        evidence |= budget
    elif cause == "decode_batch":
        tpot = median(r.get("tpot_s") for r in missed)
        evidence |= {"tpot_p50_ms": None if tpot is None else tpot * 1e3}
    elif cause == "own_prefill":
        ttft = median(r.get("ttft_s") for r in missed)
        evidence |= {"ttft_p50_ms": None if ttft is None else ttft * 1e3}
    return {"cause": cause, "verdict": verdict, "at": load, "evidence": evidence}


def _missed_ttft_alone(row: dict[str, Any], slo: Sequence[SloItem]) -> bool:
    """The stream missed a TTFT item and met every other."""
    ttft = [within(row, i) for i in slo if i.metric == "ttft"]
    return not all(ttft) and all(within(row, i) for i in slo if i.metric != "ttft")


def _prefilling_prompts(summary: dict[str, Any], ids: list[str]) -> list[dict[str, Any]]:
    by_id = {s["id"]: s for s in summary["streams"]}
    groups = Counter(by_id[i]["group"] for i in ids if i in by_id)
    tokens = {by_id[i]["group"]: by_id[i]["prompt_tokens"] for i in ids if i in by_id}
    # The largest prompt first: it is the one whose prefill the others queue behind.
    order = sorted(groups, key=lambda g: (-tokens[g], g))
    return [{"group": g, "streams": groups[g], "prompt_tokens": tokens[g]} for g in order]


def _stopped(manifest: RunManifest) -> Stop | None:
    """What run.json says stopped the search before it ran out of steps to run."""
    if manifest.interrupted:
        return "interrupted"
    return "max_time" if manifest.stopped_by else None


def _first_target(analyses: dict[str, Analysis]) -> Any:
    """Where each step found its own target (the virtual clock, a URL), the first's."""
    first = next(iter(analyses.values()), None)
    return None if first is None else first.summary["run"]["target"]


def is_capacity(manifest: RunManifest) -> bool:
    return manifest.capacity is not None


def slo_items(config: Mapping[str, Any]) -> tuple[SloItem, ...]:
    """The SLO items of run.json's capacity config, or of summary.json's capacity (one shape)."""
    return tuple(from_json(SloItem, i) for i in config["slo"])


def search_of(config: Mapping[str, Any]) -> Search:
    return from_json(Search, config["search"])


def analyze_capacity(path: Path) -> tuple[dict[str, Any], dict[str, Analysis]]:
    """The summary of a capacity directory, recomputed from every step's records (so the
    search history is redrawn offline), and each step's own analysis by its directory (as
    run.json lists it, relative to `path`)."""
    manifest = read_manifest(path)
    config = manifest.capacity or {}
    slo, search = slo_items(config), search_of(config)
    analyses: dict[str, Analysis] = {}
    steps = []
    for i, step in enumerate(manifest.runs or (), 1):
        run_dir = path / step["dir"]
        if not (run_dir / "streams.jsonl").exists():
            continue
        analysis = analyze_run(run_dir)
        analyses[step["dir"]] = analysis
        rows = judged_rows(analysis.summary, config.get("group"))
        counts = Counter(r["verdict"] for r in rows)
        steps.append({"order": i, "value": step["value"], "label": step["label"],
                       "repeat": step["repeat"], "dir": step["dir"],
                       "verdicts": dict(sorted(counts.items())),
                       "wall_s": analysis.summary["run"]["wall_s"],
                       **judge(rows, slo)})  # fmt: skip
    result = answer(steps, search, slo, _stopped(manifest))
    cause = None
    if result["first_fail"] is not None:
        at = [p for p in steps if p["value"] == result["first_fail"]]
        missed = [
            r for p in at
            for r in missed_rows(judged_rows(analyses[p["dir"]].summary,
                                             config.get("group")), slo)
        ]  # fmt: skip
        first = analyses[at[0]["dir"]].summary
        cause = binding_cause(missed, first, at[0]["label"], slo)
    summary = {
        "schema": SCHEMA,
        "capacity": {
            "scenario": manifest.scenario_name,
            "target": to_json(manifest.target) if manifest.target else _first_target(analyses),
            "clock": manifest.clock,
            "over": search.over,
            "group": config.get("group"),
            "slo": [to_json(i) for i in slo],
            "search": to_json(search),
            "max_time_s": config.get("max_time_s"),
            "requests_per_step": config.get("requests"),
            "steps": steps,
            "interrupted": bool(manifest.interrupted),
            **result,
            "boundary": cause,
        },
    }
    return canonical(summary), analyses
