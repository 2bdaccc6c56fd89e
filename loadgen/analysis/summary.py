"""summary.json: per stream, per group, per rep, per arm and per run, from one run directory.

Only the files of the run directory are read, and nothing in the summary depends on when or
where it is computed (no report time, no absolute paths; floats in canonical form), so
`loadgen report` on a copied run directory rewrites summary.json byte for byte. Statistics of
groups and reps take the measure phase only; whale and minnows are never pooled.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from loadgen import __version__
from loadgen.analysis import rates
from loadgen.analysis.added_ttft import added_ttft
from loadgen.analysis.aggregate import (
    find_whale,
    interference,
    joint_decode,
    reps_wall_s,
    server_window,
    span_ns,
    token_source_of,
    token_sources,
    window_json,
)
from loadgen.analysis.baselines import POOL_FULL
from loadgen.analysis.benchmark import benchmark_block
from loadgen.analysis.datasets import dataset_prompts
from loadgen.analysis.energy import energy_section
from loadgen.analysis.goodput import goodput
from loadgen.analysis.hist import (
    HIST_DIGITS,
    HIST_HIGHEST_US,
    HIST_LOWEST_US,
    HIST_METRICS,
    GroupHistograms,
    build_histograms,
    hlog_name,
    metric_percentiles,
    new_histogram,
    tpot_histogram,
)
from loadgen.analysis.inputs import RunInputs, damage_json, load_run
from loadgen.analysis.lengths import prompt_drift, short_output
from loadgen.analysis.needles import needle_recall
from loadgen.analysis.phases import phase_summary
from loadgen.analysis.registry import GAP_METRICS, names_where
from loadgen.analysis.replicas import replicas_block
from loadgen.analysis.reuse import trace_prompts_raised, trace_reuse, trace_rows_skipped
from loadgen.analysis.selferror import (
    LOOP_LAG_LIMIT_MS,
    ClientLimits,
    host_crowding,
    send_late_by_holder,
    server_waited,
    stream_server_waits,
)
from loadgen.analysis.server_log import ServerLogWitness, server_log_witness
from loadgen.analysis.sessions import session_turns
from loadgen.analysis.soak import is_soak
from loadgen.analysis.stats import canonical, describe, dumps_made_canonical, median, spread
from loadgen.analysis.streams import MS, chunk_token_tally, stream_metrics
from loadgen.analysis.timeline import Timeline
from loadgen.analysis.verdicts import (
    ADMITTED_FACTOR,
    ADMITTED_SLACK_S,
    CLIENT_LATE_S,
    PREEMPT_STALL_FACTOR,
    RATION_FRACTION,
    RATION_MIN_SHARE,
    RATION_MIN_WINDOW_TOKENS,
    VerdictContext,
    build_context,
    classify_streams,
)
from loadgen.analysis.warmth import warm_cache
from loadgen.codec import to_json
from loadgen.records import MetricsSample, StreamRecord
from loadgen.redact import redact
from loadgen.run_manifest import RunManifest, TargetInfo

NS = rates.NS
SCHEMA = 1
MEASURE = "measure"


@dataclass(frozen=True)
class Analysis:
    """A run's summary (canonical JSON-ready dict) and the histograms behind hist/."""

    summary: dict[str, Any]
    histograms: dict[str, GroupHistograms]
    timeline: Timeline


def analyze_run(path: Path) -> Analysis:
    """Reads the run directory at `path` and analyses it."""
    return analyze(load_run(path))


def write_summary(path: Path, summary: dict[str, Any]) -> None:
    """summary.json of the run directory at `path` from a summary stats.canonical made (the
    analyses' own), its secrets masked (a run.json written before redaction existed still
    holds them)."""
    (path / "summary.json").write_bytes(dumps_made_canonical(redact(summary)))


def analyze(inputs: RunInputs) -> Analysis:
    """The whole analysis of one run directory's contents."""
    records, manifest = inputs.streams, inputs.manifest
    timeline = Timeline(inputs.metrics)
    host_cpu = (manifest.client or {}).get("host_cpu", {})
    waits = stream_server_waits(records, host_cpu)
    ctx = build_context(records, timeline, manifest, waits)
    verdicts, seated = classify_streams(ctx), ctx.seats
    for sub in replica_contexts(records, inputs.replica_metrics, manifest, waits):
        verdicts, seated = verdicts | classify_streams(sub), seated | sub.seats
    streams = []
    for r in sorted(records, key=lambda r: (r.t_intended_ns, r.id)):
        row = stream_metrics(r)
        seat = seated.get(r.id)
        row["t_admit_s"] = None if seat is None else seat.admit_ns / NS
        row["verdict"], row["evidence"] = verdicts[r.id].name, verdicts[r.id].evidence
        streams.append(row)
    measure = [r for r in records if r.phase == MEASURE]
    rows = {s["id"]: s for s in streams if s["phase"] == MEASURE}
    histograms = build_histograms(measure)
    asked = asked_percentiles(manifest)
    reps = _reps(measure, records, rows, timeline)
    counts = record_counts(manifest, records, rows)
    good = goodput(measure, rows, manifest.slo, manifest.slo_shares)
    energy = energy_section(inputs.telemetry, measure, span_ns(measure))
    witness = _server_log(inputs, timeline)
    summary = {
        "schema": SCHEMA,
        "run": (run := _run_section(manifest, records, measure, rows, timeline, ctx, counts))
        | {
            "records": _records_block(counts, inputs),
            "server_log": None if witness is None else to_json(witness),
        },
        "replicas": _replicas(manifest, measure, rows, inputs, run["server"]),
        "streams": streams,
        "groups": _groups(measure, rows, timeline, manifest, reps, (histograms, asked)),
        "reps": reps,
        "arms": _arms(records),
        "mixed": _mixed(measure, records, timeline, ctx.seats),
        "hist": _hist_section(histograms),
        "sessions": {
            g: [to_json(t) for t in turns] for g, turns in session_turns(measure, rows).items()
        },
        "goodput": None if good is None else to_json(good),
        "needles": [to_json(n) for n in needle_recall(measure)],
        "datasets": [to_json(d) for d in dataset_prompts(measure, manifest)],
        "energy": None if energy is None else to_json(energy),
        "benchmark": to_json(benchmark_block(measure)),
        "telemetry_notes": [] if manifest.telemetry is None else list(manifest.telemetry.notes),
        "thresholds": {
            "admitted_factor": ADMITTED_FACTOR,
            "admitted_slack_s": ADMITTED_SLACK_S,
            "client_late_s": CLIENT_LATE_S,
            "loop_lag_limit_ms": LOOP_LAG_LIMIT_MS,
            "pool_full": POOL_FULL,
            "ration_fraction": RATION_FRACTION,
            "ration_min_window_tokens": RATION_MIN_WINDOW_TOKENS,
            "ration_min_share": RATION_MIN_SHARE,
            "preempt_stall_factor": PREEMPT_STALL_FACTOR,
        },
    }
    if asked:
        summary["percentiles"] = {
            "asked": list(asked),
            "total": _total_percentiles(histograms, measure, asked),
        }
    return Analysis(canonical(summary), histograms, timeline)


def asked_percentiles(manifest: RunManifest) -> tuple[float, ...]:
    """The percentiles `--metric-percentiles` asked for (run.json), none when not asked; an
    entry outside [0, 100] is left out (one that is not a number drops the field on reading)."""
    return tuple(p for p in manifest.metric_percentiles or () if 0 <= p <= 100)


def _group_percentiles(
    gh: GroupHistograms, recs: list[StreamRecord], asked: tuple[float, ...]
) -> dict[str, Any]:
    """A group's `percentiles` entry where they were asked for, else nothing."""
    if not asked:
        return {}
    merged = {m: gh.merged(m) for m in HIST_METRICS}
    return {"percentiles": metric_percentiles(merged, tpot_histogram(recs), asked)}


def _total_percentiles(
    histograms: dict[str, GroupHistograms], measure: list[StreamRecord], asked: tuple[float, ...]
) -> dict[str, Any]:
    """The percentiles of every measured stream: the groups' histograms added together."""
    total = {m: new_histogram() for m in HIST_METRICS}
    for gh in histograms.values():
        for m, h in total.items():
            h.add(gh.merged(m))
    return metric_percentiles(total, tpot_histogram(measure), asked)


def _server_log(inputs: RunInputs, timeline: Timeline) -> ServerLogWitness | None:
    """The server's engine lines beside the polls; None without a kept log or the wall-clock
    anchor that places its lines (runs before run_start_wall_ns), and over several replicas:
    one replica's lines against the fleet's summed polls read a false `!!` disagreement."""
    start = inputs.manifest.run_start_wall_ns
    targets = inputs.manifest.targets
    if inputs.server_log is None or start is None or (targets and len(targets.urls) > 1):
        return None
    offset = inputs.manifest.utc_offset_s or 0
    return server_log_witness(inputs.server_log, inputs.streams, timeline, start, offset)


def _run_section(
    manifest: RunManifest,
    records: list[StreamRecord],
    measure: list[StreamRecord],
    rows: dict[str, dict[str, Any]],
    timeline: Timeline,
    ctx: VerdictContext,
    counts: RecordCounts,
) -> dict[str, Any]:
    client = dict(manifest.client or {})
    lag = client.get("loop_lag_max_ms")
    span = span_ns(measure)
    verdict_counts = _count(rows[r.id]["verdict"] for r in measure)
    warm = warm_cache([rows[r.id]["evidence"] for r in measure])
    # The banner counts what the verdict table counts; streams whose server verdict outweighed
    # their timing error are named beside it, never added to it.
    target = _target(manifest.target)
    limits = ClientLimits(
        counts.measured, counts.limited, counts.beyond_tolerance,
        lag if lag is not None and lag > LOOP_LAG_LIMIT_MS else None,
        host_crowding(
            (target or {}).get("url"), client.get("workers", 1), client.get("host_cpu", {})
        ),
        send_late=send_late_by_holder(measure),
        server_waited=server_waited(measure, ctx.server_waits),
    )  # fmt: skip
    phases = _count(r.phase for r in records)
    server = (
        server_window(timeline, *span)
        if span
        else {"available": False, "note": "no measured streams"}
    )
    reuse = trace_reuse(manifest, server)
    added = added_ttft(measure, records, timeline, float(manifest.speed or 1.0))
    return {
        "scenario": manifest.scenario_name,
        "target": target,
        "model": manifest.model,
        "seed": manifest.seed,
        "seed_source": manifest.seed_source,
        "tool_version": manifest.tool_version,
        "analysis_version": __version__,
        "interrupted": bool(manifest.interrupted),
        "client_limited": limits.limits_run,
        "client_limited_streams": counts.limited,
        "client_limits": to_json(limits),
        "warm_cache": None if warm is None else to_json(warm),
        "short_output": _json_or_none(short_output(measure)),
        "prompt_drift": _json_or_none(prompt_drift(measure)),
        "client": client,
        "speed": 1.0 if manifest.speed is None else manifest.speed,
        "clock": manifest.clock,
        "token_counter": manifest.token_counter,
        "token_sources": token_sources(measure),
        "prompt_shapes": dict(manifest.prompt_shapes or {}),
        "server_facts": dict(manifest.server or {}),
        "cache_checks": [to_json(c) for c in manifest.cache_checks or ()],
        # Where the measured TTFTs went, phase by phase (analysis/phases.py); None where no
        # stream carries the stamps (aiohttp's reader, the virtual clock).
        "http_phases": to_json(phase_summary(measure)),
        # `--until-precise`'s end as the engine recorded it (analysis/precision.py).
        "until_precise": _json_or_none(manifest.until_precise),
        "arm": _json_or_none(manifest.arm),
        "cap": to_json(ctx.cap),
        "prefill_baseline": to_json(ctx.baseline),
        "streams": {
            "total": len(records),
            "measure": len(measure),
            "ok": sum(r.status == "ok" for r in measure),
            "error": sum(r.status != "ok" for r in measure),
            "by_phase": phases,
        },
        "verdicts": verdict_counts,
        "window": None if span is None else window_json(*span),
        "wall_s": None if span is None else (span[1] - span[0]) / NS,
        "reps_wall_s": reps_wall_s(measure),
        "server": server,
        "trace_reuse": None if reuse is None else to_json(reuse),
        "trace_prompts_raised": trace_prompts_raised(manifest),
        "trace_rows_skipped": _json_or_none(trace_rows_skipped(manifest)),
        "added_ttft": None if added is None else to_json(added),
    }


def replica_contexts(
    records: list[StreamRecord],
    samples: Sequence[MetricsSample],
    manifest: RunManifest,
    server_waits: Mapping[str, int] | None = None,
) -> list[VerdictContext]:
    """Each replica's streams judged against its own /metrics (its seats, its cache, its
    queue), where the run routed over several: the fleet's summed gauges would hold one
    replica's streams to all replicas' load."""
    replicas = sorted({s.replica for s in samples if s.replica is not None})
    return [
        build_context([r for r in records if r.replica == i],
                      Timeline([s for s in samples if s.replica == i]), manifest, server_waits)
        for i in replicas
    ]  # fmt: skip


def _replicas(
    manifest: RunManifest,
    measure: list[StreamRecord],
    rows: dict[str, dict[str, Any]],
    inputs: RunInputs,
    server: dict[str, Any],
) -> dict[str, Any] | None:
    block = replicas_block(manifest.targets, measure, rows, inputs.replica_metrics, server)
    return None if block is None else to_json(block)


def _json_or_none(value: Any) -> Any:
    return None if value is None else to_json(value)


def _target(target: TargetInfo | str | None) -> dict[str, Any] | None:
    """The manifest's target; early `loadgen request` manifests held the bare URL."""
    if isinstance(target, str):
        return {"url": target, "kind": "external"}
    return None if target is None else cast(dict[str, Any], to_json(target))


@dataclass(frozen=True)
class RecordCounts:
    """The one definition of planned / measured / limited that the report header, the banner,
    the verdict table and summary.json's `records` block all read (an agent_sessions run once
    printed "32 measured of 0 planned" beside "of 32", and an Azure replay's banner said 166
    limited while its verdict table said 3).

    planned: measured requests the plan declares, session turns included (None where a
    duration may end a rep early). measured: records of measured phases. limited: measured
    streams whose verdict is client_limited. beyond_tolerance: measured streams timed beyond
    tolerance that kept a server verdict because it outweighed loadgen's own error."""

    planned: int | None
    measured: int
    not_measured: int
    limited: int
    beyond_tolerance: int

    @property
    def missing(self) -> int | None:
        """Planned streams with no record (the run was stopped, or lines were lost)."""
        return None if self.planned is None else max(self.planned - self.measured, 0)


def record_counts(
    manifest: RunManifest, records: list[StreamRecord], rows: dict[str, dict[str, Any]]
) -> RecordCounts:
    """Counts of `records` against the plan; `rows` are the measured streams' summary rows."""
    measure = [r for r in records if r.phase == MEASURE]
    verdicts = [rows[r.id]["verdict"] for r in measure]
    limited = sum(v == "client_limited" for v in verdicts)
    flagged = sum("client_error" in rows[r.id]["evidence"] for r in measure)
    beyond = flagged - sum(
        v == "client_limited" and "client_error" in rows[r.id]["evidence"]
        for r, v in zip(measure, verdicts, strict=True)
    )
    # A plan that --until-precise cut short was a bound, not a promise, as is a soak's (its
    # request cap, which its duration ends): no stream is missing.
    cut = manifest.until_precise is not None and manifest.until_precise.reached
    cut = cut or is_soak(manifest)
    return RecordCounts(None if cut else manifest.planned_streams, len(measure),
                        len(records) - len(measure), limited, beyond)  # fmt: skip


def _records_block(counts: RecordCounts, inputs: RunInputs) -> dict[str, Any]:
    """summary.json's `records`: the counts, and lines skipped as unreadable and run.json fields
    dropped for their type beside them."""
    return {"planned": counts.planned, "measured": counts.measured, "missing": counts.missing,
            "not_measured": counts.not_measured, "limited": counts.limited,
            "beyond_tolerance": counts.beyond_tolerance} | damage_json(inputs)  # fmt: skip


def _count(items: Iterable[Any]) -> dict[str, int]:
    return dict(Counter(items))


def _field_stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Each group-stats field described over the group's streams; an answer's length over the
    ok ones (5 HTTP 500s of 8 made a group of 8-token answers read a median of 0 tokens)."""
    ok = [row for row in rows if row["status"] == "ok"]
    return {f: describe(row[f] for row in (ok if f in ANSWER_LENGTH else rows))
            for f in names_where("group_stats")}  # fmt: skip


# The group-stats fields that measure an answer's length, which a failed stream cut short.
ANSWER_LENGTH = frozenset({"completion_tokens", "tokens_per_chunk"})


def _pooled_gaps(recs: list[StreamRecord]) -> dict[str, Any]:
    return {g.name: describe(t / MS for r in recs for t in g.gaps_ns(r)) for g in GAP_METRICS}


def _groups(
    measure: list[StreamRecord],
    rows: dict[str, dict[str, Any]],
    timeline: Timeline,
    manifest: RunManifest,
    reps_out: list[dict[str, Any]],
    percentiles: tuple[dict[str, GroupHistograms], tuple[float, ...]],
) -> dict[str, Any]:
    shapes = manifest.prompt_shapes or {}
    histograms, asked = percentiles
    out: dict[str, Any] = {}
    for group in sorted({r.group for r in measure}):
        recs = [r for r in measure if r.group == group]
        grows = [rows[r.id] for r in recs]
        reps = sorted({r.rep for r in recs})
        per_rep = {
            f: [median(rows[r.id][f] for r in recs if r.rep == rep) for rep in reps]
            for f in names_where("rep_medians")
        }
        span = span_ns(recs)
        server = server_window(timeline, *span) if span else None
        out[group] = {
            "n": len(recs),
            "ok": sum(r.status == "ok" for r in recs),
            "errors": _count(r.error.cls for r in recs if r.error),
            "reps": len(reps),
            "prompt_shape": shapes.get(group),
            "token_source": token_source_of(recs),
            "chunk_tokens": chunk_token_tally(recs),
            **_field_stats(grows),
            **_pooled_gaps(recs),
            "verdicts": _count(row["verdict"] for row in grows),
            "rep_medians": per_rep,
            "rep_spread": {f: spread(v) for f, v in per_rep.items()},
            "server": server,
            "cohort": _cohort([r for r in reps_out if r["group"] == group], server),
            "reasoning": _reasoning(recs, grows),
            **_group_percentiles(histograms[group], recs, asked),
            **_seat_waits(recs),
        }
    return out


def _seat_waits(recs: list[StreamRecord]) -> dict[str, Any]:
    """Under an arrival's seat cap, how many streams waited for a seat and how long (ms);
    nothing for a group sent without one."""
    waits = [r.seat_wait_ns for r in recs if r.seat_wait_ns is not None]
    if not waits:
        return {}
    return {"seat_wait": {"capped": len(waits), "waited": sum(w > 0 for w in waits),
                          "ms": describe(w / MS for w in waits)}}  # fmt: skip


def _reasoning(recs: list[StreamRecord], grows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A group's reasoning figures (None when no stream of it reasoned): TTFO beside TTFT,
    reasoning and output decode rates apart, and whether the reasoning token counts are the
    server's (`usage_details`) or estimated (every source named)."""
    thinking = [row for r, row in zip(recs, grows, strict=True) if r.reasoning_chunks]
    if not thinking:
        return None
    sources = sorted({row["reasoning_token_source"] or "none" for row in thinking})
    return {
        "streams": len(thinking),
        "ttfo_s": describe(row["ttfo_s"] for row in grows),
        "ttfo_intended_s": describe(row["ttfo_intended_s"] for row in grows),
        "reasoning_tokens": describe(row["reasoning_tokens"] for row in thinking),
        "reasoning_token_source": "+".join(sources),
        "estimated": sources != ["usage_details"],
        "reasoning_tok_s": describe(row["reasoning_tok_s"] for row in thinking),
        "output_tok_s": describe(row["output_tok_s"] for row in thinking),
    }


def _cohort(reps: list[dict[str, Any]], server: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ladder row of a group: its cohorts (one per rep) summarised over reps."""
    jd = [r["joint_decode"] for r in reps if r["joint_decode"] is not None]
    if not jd:
        return None
    srv = server or {}
    return {
        "n": max(j["n"] for j in jd),
        "peak_decoding": max(j["peak_decoding"] for j in jd),
        "reps": len(jd),
        "steady": sum(j["steady"] for j in jd),
        "per_stream_tok_s": median(j["per_stream_tok_s"]["pooled"] for j in jd),
        "agg_tok_s": median(j["tok_s"] for j in jd),
        "agg_chunks_per_s": median(j.get("client", {}).get("chunks_per_s") for j in jd),
        "agg_token_source": "+".join(sorted({j["token_source"] for j in jd if j["token_source"]})),
        "kv_peak_perc": srv.get("kv_peak_perc"),
        "duration_s": (srv.get("window") or {}).get("duration_s"),
        "preemptions": srv.get("preemptions"),
    }


def _reps(
    measure: list[StreamRecord],
    everyone: list[StreamRecord],
    rows: dict[str, dict[str, Any]],
    timeline: Timeline,
) -> list[dict[str, Any]]:
    out = []
    for group, rep in sorted({(r.group, r.rep) for r in measure}):
        recs = [r for r in measure if r.group == group and r.rep == rep]
        span = span_ns(recs)
        grows = [rows[r.id] for r in recs]
        out.append(
            {
                "group": group,
                "rep": rep,
                "n": len(recs),
                **{f: describe(row[f] for row in grows) for f in names_where("rep_stats")},
                "wall_s": None if span is None else (span[1] - span[0]) / NS,
                "joint_decode": joint_decode(recs, everyone, timeline),
                "server": server_window(timeline, *span) if span else None,
            }
        )
    return out


def _arms(records: list[StreamRecord]) -> dict[str, Any]:
    """Sweep arms present in this run's records (a sweep parent's summary fills in more)."""
    return {a: {"streams": n} for a, n in sorted(_count(r.arm for r in records if r.arm).items())}


def _mixed(
    measure: list[StreamRecord],
    everyone: list[StreamRecord],
    timeline: Timeline,
    seats: dict[str, Any],
) -> dict[str, Any] | None:
    """Whale + minnows: per rep, the interference of each whale's prefill on the minnows."""
    found = find_whale(measure)
    if found is None:
        return None
    whale_group, minnow_groups = found
    reps = []
    for rep in sorted({r.rep for r in measure}):
        whales = [r for r in measure if r.rep == rep and r.group == whale_group]
        minnows = [r for r in measure if r.rep == rep and r.group in minnow_groups]
        if not whales or not minnows:
            continue
        cohort = whales + minnows
        span = span_ns(cohort)
        reps.append(
            {
                "rep": rep,
                "wall_s": None if span is None else (span[1] - span[0]) / NS,
                "interference": [interference(w, minnows, seats.get(w.id)) for w in whales],
                "joint_decode": joint_decode(cohort, everyone, timeline),
            }
        )
    return {"whale": whale_group, "minnows": minnow_groups, "reps": reps}


def _hist_section(histograms: dict[str, GroupHistograms]) -> dict[str, Any]:
    return {
        "unit": "us",
        "range_us": [HIST_LOWEST_US, HIST_HIGHEST_US],
        "significant_digits": HIST_DIGITS,
        "files": sorted(hlog_name(g, m) for g in histograms for m in HIST_METRICS),
        "out_of_range": {g: dict(sorted(h.out_of_range.items())) for g, h in histograms.items()},
        "counts": {
            g: {m: h.merged(m).get_total_count() for m in HIST_METRICS}
            for g, h in sorted(histograms.items())
        },
    }
