"""The report's tables, built from a summary (summary.json's dict) in the seeds' shapes.

Every table names its token source and prompt shape, and the sim speed factor when it is not
1.0; chunks/s stand beside tokens/s whenever a chunk carried more than one token.
"""

from __future__ import annotations

import io
from typing import Any

from loadgen.analysis.benchmark import read_benchmark
from loadgen.analysis.evidence import (
    ClientErrorEvidence,
    RationEvidence,
    WaitEvidence,
)
from loadgen.analysis.phases import PhaseSummary
from loadgen.analysis.selferror import LOADGEN_HOLDERS, ClientLimits
from loadgen.analysis.summary_types import (
    Cohort,
    HistBlock,
    RecordTally,
    RunSummary,
    ServerWindow,
    StreamRow,
    StreamTally,
    any_multi_token,
    read_groups,
    read_run,
    read_stream_rows,
)
from loadgen.analysis.sweep import read_mixed
from loadgen.analysis.sweep_types import MixedRow
from loadgen.analysis.verdicts import VERDICTS
from loadgen.clock import ClockName
from loadgen.codec import from_json
from loadgen.report.banners import (
    cache_check_line,
    prompt_drift_line,
    run_banner,
    short_output_line,
    warm_cache_line,
)
from loadgen.report.bench_tables import benchmark_tables, percentile_table, seat_wait_table
from loadgen.report.sections import (
    dataset_table,
    energy_table,
    goodput_table,
    needle_table,
    reasoning_table,
    replicas_table,
    sessions_table,
)
from loadgen.report.tables import (
    DASH,
    Table,
    count,
    num,
    rate,
    secs,
    span,
    text_or_dash,
    to_plain,
    to_rich,
    triple,
)
from loadgen.report.trace_lines import raised_lines, reuse_lines, skipped_lines
from loadgen.report.witness_lines import added_ttft_lines, server_log_lines, server_log_table
from loadgen.run_manifest import Precision, ProfileRef, UntilPrecise

MAX_LISTED_STREAMS = 20
_NO_CAP = "no server facts, no plateau; state it with --server-facts max_num_seqs=N"


def notes(summary: dict[str, Any], groups: list[str] | None = None) -> tuple[str, ...]:
    """Token source, prompt shape and (when not 1.0) the sim speed of the given groups."""
    by_name = {g.name: g for g in read_groups(summary)}
    names = sorted(by_name) if groups is None else groups
    chosen = [by_name[n] for n in names if n in by_name]
    sources = sorted({g.token_source for g in chosen})
    shapes = [f"{g.name}={g.prompt_shape}" for g in chosen if g.prompt_shape]
    out = [
        f"tokens: {', '.join(sources) or DASH}",
        f"prompt shape: {', '.join(shapes) if shapes else 'not recorded'}",
    ]
    speed = read_run(summary).speed
    if speed not in (None, 1.0):
        out.append(f"sim speed x{speed:g} (times are wall-clock at that speed)")
    return tuple(out)


def header(run: RunSummary) -> list[str]:
    """The report's head lines."""
    target = run.target
    lines = [
        f"loadgen report: scenario {run.scenario or DASH}"
        f" | target {text_or_dash(target.url)} ({text_or_dash(target.kind)})"
        f" | model {run.model or DASH} | seed {text_or_dash(run.seed)}"
        + (f" ({run.seed_source})" if run.seed_source else "")
    ]
    if target.kind == "sim" and target.flags:
        # The sim's profile sets its time scale (default = an RTX 4090 shape at 1/10 time), so
        # no sim figure is quoted without it.
        lines.append("sim: loadgen sim " + " ".join(target.flags))
    if run.clock == ClockName.VIRTUAL:
        lines.append(
            "clock: virtual (the sim's engine on a discrete-event clock; the client and the "
            "HTTP path were not in the loop: figures are the engine model's, exact)"
        )
    lines += user_server_lines(run)
    st, cap, base = run.streams, run.cap, run.prefill_baseline
    if st is not None and cap is not None and base is not None:
        lines.append(
            f"streams: {st.measure} measured ({st.ok} ok, {st.error} errors)"
            f"{_unmeasured(st)} | wall {secs(run.wall_s)} s | cap {cap.value or DASH}"
            f" ({cap.source or 'unknown'}) | prefill baseline {rate(base.tok_s)} tok/s"
            f" ({base.source}) | prompt tokens by {run.token_counter or DASH}"
        )
    lines += reuse_lines(run.trace_reuse)
    lines += raised_lines(run.trace_prompts_raised)
    lines += skipped_lines(run.trace_rows_skipped)
    lines += record_lines(run.records)
    lines += polled_lines(run.server)
    lines += added_ttft_lines(run.added_ttft, virtual=run.clock == ClockName.VIRTUAL)
    lines += server_log_lines(run.server_log)
    if run.boots_per_arm:
        lines.append(f"boots per arm: {run.boots_per_arm} ({run.boots_note or ''})")
    if run.interrupted:
        lines.append("!! INTERRUPTED: a partial run; every figure covers what finished")
    if run.until_precise is not None:
        lines.append(precise_line(run.until_precise))
    if run.http_phases is not None:
        lines.append(phases_line(run.http_phases))
    if run.client_limits is not None and (late := send_late_line(run.client_limits)):
        lines.append(late)
    lines += map(cache_check_line, run.cache_checks)
    if run.warm_cache is not None:
        lines.append(warm_cache_line(run.warm_cache))
    if run.short_output is not None:
        lines.append(short_output_line(run.short_output))
    if run.prompt_drift is not None:
        lines.append(prompt_drift_line(run.prompt_drift))
    if (banner := run_banner(run)) is not None:
        # First of all lines: nothing below can be read without knowing it.
        lines.insert(0, banner)
    return lines


def phases_line(p: PhaseSummary) -> str:
    """Where the TTFTs went: each HTTP phase's p50, and who held the send side."""
    med = " | ".join(f"{name.replace('_', ' ')} {ms:.3g}" for name, ms in p.p50_ms.items())
    held = ", ".join(f"{who} {n}" for who, n in p.held_by.items())
    return (
        f"http phases p50 ms ({p.stamped} streams, {p.reused} on kept-alive connections):"
        f" {med}; send side held by {held}"
    )


def send_late_line(c: ClientLimits) -> str | None:
    """The `!!` line for send sides late beyond tolerance that loadgen did not hold (those it
    held are in the CLIENT LIMITED banner): time inside these TTFTs before the server answered
    at all, which a server-side TTFT (vLLM's histogram, firehose's log) never sees; on the H200
    host a single firehose read 1,024 requests 3.6 ms late at p50 behind 8 client workers."""
    late = {who: n for who, n in c.send_late.items() if who not in LOADGEN_HOLDERS}
    if not late:
        return None
    by = ", ".join(f"{who} {n}" for who, n in sorted(late.items()))
    return (
        f"!! SEND SIDE LATE: {sum(late.values())} of {c.measured} requests waited beyond "
        f"tolerance before the server's response head (held by: {by}): in these TTFTs, not in "
        "a server-side TTFT (see added TTFT)"
    )


def standing_text(p: Precision) -> str:
    """Where one `--until-precise` target stood: its estimate, its 95% interval and the margin
    reached against its goal, at its n."""
    if p.margin is None:
        return f"{p.target} no interval yet with n={p.n} (goal {p.goal:.1%})"
    return (
        f"{p.target} {p.estimate:.4g} (95% CI {p.low:.4g}-{p.high:.4g}) within"
        f" {p.margin:.1%} (goal {p.goal:.1%}) at n={p.n}"
    )


def precise_line(u: UntilPrecise) -> str:
    """How `--until-precise` ended: each target's estimate, its 95% interval, the margin it
    reached against its goal and the n it took; a goal never reached is a `!!` line."""
    parts = [standing_text(p) for p in u.targets]
    bound = f"{u.planned} planned" if u.planned is not None else "the plan's duration"
    if u.reached:
        return (
            f"until precise: {'; '.join(parts)}; stopped sending after {u.measured} measured"
            f" streams of {bound}"
        )
    return f"!! NOT PRECISE: {bound} ended first: {'; '.join(parts)}"


def _unmeasured(streams: StreamTally) -> str:
    """The records beside the measured ones, by phase: "3 measured ... of 12" once read as 12
    planned beside "3 of 3 planned" (deep_decode's 9 were warmup)."""
    other = {p: n for p, n in sorted(streams.by_phase.items()) if p != "measure"}
    if not other:
        return ""
    return " + " + ", ".join(f"{n} {p}" for p, n in other.items()) + " (not measured)"


def what_ran(run: RunSummary, sim_profile: ProfileRef | None) -> str:
    """The clock and the server a run measured: "virtual clock, sim profile P" or "wall clock,
    vllm", so a real and a predicted run are never mistaken for each other."""
    if sim_profile is not None and sim_profile.name:
        return f"{run.clock} clock, sim profile {sim_profile.name} ({sim_profile.path})"
    return f"{run.clock} clock, {run.target.kind or 'server unknown'}"


def user_server_lines(run: RunSummary) -> list[str]:
    """What the user said about an external server: its launch flags and its limits."""
    out = []
    if run.target.kind == "external" and run.target.flags:
        out.append("server flags (user): " + " ".join(run.target.flags))
    if stated := run.server_facts.user_facts:
        out.append("server facts (user): " + ", ".join(f"{k}={v}" for k, v in stated))
    return out


def record_lines(rec: RecordTally | None) -> list[str]:
    """Measured of planned, and what is missing: a lost record is never silent."""
    if rec is None:
        return []
    return [f"records: {rec.measured} measured of {text_or_dash(rec.planned)} planned",
            *lost_lines(rec)]  # fmt: skip


def polled_lines(srv: ServerWindow) -> list[str]:
    """A measured window the server's polls fall short of: its counters are of a part."""
    polled, window = srv.polled, srv.window
    if polled is None or window is None:
        return []
    part = f"{secs(polled.from_s)}-{secs(polled.to_s)}"
    whole = f"{secs(window.from_s)}-{secs(window.to_s)}"
    return [f"!! METRICS GAP: the server's polls cover {part} s of the measured {whole} s: its "
            "counters and peaks are of that part, and generation tok/s is not given"]  # fmt: skip


def lost_lines(rec: RecordTally) -> list[str]:
    """Planned streams with no record, and the lines and fields of a run directory that could
    not be read: never silent."""
    out = []
    if rec.missing:
        out.append(
            f"!! MISSING: {rec.missing} planned streams have no record (the run was stopped"
            " before sending them, or their lines were lost)"
        )
    if rec.unreadable_lines:
        out.append(f"!! TORN: {rec.unreadable_lines} line(s) of streams.jsonl could not be read")
    if rec.repeated_lines:
        out.append(f"!! REPEATED: {rec.repeated_lines} line(s) of streams.jsonl repeat a stream "
                   "id read before: each stream's first record is counted")  # fmt: skip
    if rec.unreadable_metrics_lines:
        n = rec.unreadable_metrics_lines
        out.append(f"!! TORN: {n} line(s) of metrics.jsonl could not be read")
    if rec.dropped_manifest_fields:
        fields = ", ".join(rec.dropped_manifest_fields)
        out.append(f"!! run.json: ignored field(s) of the wrong type: {fields}")
    return out


def latency_table(summary: dict[str, Any]) -> Table:
    rows = []
    for g in read_groups(summary):
        t, ti, e = g.of("ttft_s"), g.of("ttft_intended_s"), g.of("e2e_s")
        rows.append(
            (
                g.name,
                f"{g.ok}/{g.n}",
                num(g.of("prompt_tokens").median, 0),
                triple(t, secs),
                secs(t.p90),
                secs(t.p99),
                secs(ti.p50),
                secs(ti.p99),
                secs(e.p50),
                secs(e.p99),
            )
        )
    cols = ("group", "ok/n", "prompt", "TTFT min/med/max", "p90", "p99", "from intended p50", "p99")
    return Table(
        "Latency per group (measure phase, seconds)",
        (*cols, "e2e p50", "p99"),
        tuple(rows),
        (*notes(summary), "TTFT from the actual send; 'from intended' adds loadgen's lateness"),
    )


def decode_table(summary: dict[str, Any]) -> Table:
    groups = read_groups(summary)
    multi = any_multi_token(groups)
    rows = []
    for g in groups:
        row = [g.name, triple(g.of("decode_tok_s"))]
        if multi:
            row.append(triple(g.of("chunks_per_s")))
        tpot, chunk_gap, token_gap = (
            g.of("tpot_s").median,
            g.of("itl_chunk_ms"),
            g.of("itl_token_ms"),
        )
        row += [
            num(g.of("tokens_per_chunk").median, 2),
            num(None if tpot is None else tpot * 1e3, 2),
            f"{num(chunk_gap.p50, 1)}/{num(chunk_gap.p99, 1)}",
            f"{num(token_gap.p50, 1)}/{num(token_gap.p99, 1)}",
            num(g.of("completion_tokens").median, 0),
        ]
        rows.append(tuple(row))
    cols = ["group", "decode tok/s min/med/max"]
    if multi:
        cols.append("chunks/s min/med/max")
    cols += ["tok/chunk", "TPOT ms", "chunk gap p50/p99 ms", "token gap p50/p99 ms", "tokens"]
    extra: tuple[str, ...] = (
        "decode-only: (tokens - first chunk's) / (last - first chunk); TTFT split out",
    )
    if multi:
        extra += (*chunk_notes(summary),)
    return Table(
        "Decode per group (measure phase)", tuple(cols), tuple(rows), notes(summary) + extra
    )


def chunk_notes(summary: dict[str, Any]) -> list[str]:
    """What the chunks carried, as seen; a cause (speculative decoding) only when the server
    says it runs it: its spec-decode counters moved, or its facts name draft tokens."""
    out = []
    for g in read_groups(summary):
        tally, tpc = g.chunk_tokens, g.of("tokens_per_chunk")
        if tally.multi:
            out.append(
                f"{g.name}: {tally.multi} of {tally.chunks} chunks carried >1 token;"
                f" tokens/chunk = {tally.tokens / tally.chunks:.2f}"
            )
        elif not tally.chunks and tpc.n:
            out.append(
                f"{g.name}: tokens/chunk {num(tpc.min, 2)}..{num(tpc.max, 2)} per stream"
                " (the server did not say what each chunk carried)"
            )
    run = read_run(summary)
    acceptance, drafts = run.server.spec_acceptance, run.server_facts.speculative_tokens
    if acceptance is not None:
        out.append(
            f"the server reports speculative decoding (acceptance {acceptance:.3f}): a chunk can"
            " carry one engine step of several tokens, so chunks/s is a step rate"
        )
    elif drafts:
        out.append(
            f"the server runs speculative decoding ({drafts} draft tokens, from its facts):"
            " a chunk can carry one engine step of several tokens, so chunks/s is a step rate"
        )
    return out


def verdict_table(summary: dict[str, Any]) -> Table:
    rows = []
    for g in read_groups(summary):
        rows.append((g.name, *(str(g.verdicts.get(v, 0)) for v in VERDICTS)))
    run = read_run(summary)
    cap, base = run.cap, run.prefill_baseline
    assert cap is not None and base is not None, "a run summary has both; a sweep parent neither"
    return Table(
        "Verdicts per group (why a stream waited or crawled)",
        ("group", *VERDICTS),
        tuple(rows),
        (
            f"cap {cap.value or 'unknown'}"
            f" ({cap.source or _NO_CAP});"
            f" normal prefill from {base.source}",
            "starvation = prefill_hol + rationed_decode; admission caps = admission_cap",
        ),
    )


def waits_table(summary: dict[str, Any]) -> Table | None:
    rows = [
        (s.id, s.group, str(s.rep), s.verdict, secs(s.ttft_s), _why(s))
        for s in read_stream_rows(summary)
        if s.phase == "measure" and s.verdict != "admitted"
    ]
    if not rows:
        return None
    more = len(rows) - MAX_LISTED_STREAMS
    extra = (f"... and {more} more (summary.json has all)",) if more > 0 else ()
    return Table(
        "Streams that waited or crawled",
        ("stream", "group", "rep", "verdict", "TTFT s", "evidence"),
        tuple(rows[:MAX_LISTED_STREAMS]),
        extra,
        left=frozenset({0, 1, 3, 5}),
    )


def _why(s: StreamRow) -> str:
    """The evidence cell: how long each state held a wait, how a decode crawled, else the
    reason (a client_limited stream shows what the server verdict it overrode had found)."""
    ev = s.typed_evidence
    found = ev.server if isinstance(ev, ClientErrorEvidence) else ev
    if isinstance(found, WaitEvidence):
        return " ".join(f"{k}={v:.2f}s" for k, v in sorted(found.wait.held_s.items()) if v > 0)
    if isinstance(found, RationEvidence):
        return f"{found.crawl.during_tok_s:.3g} vs {found.crawl.steady_tok_s:.3g} tok/s"
    return ev.reason[:60]


def ladder_table(
    cohorts: list[tuple[str, Cohort]], multi: bool, base_notes: tuple[str, ...]
) -> Table | None:
    """streams/rep | peak decoding | per-stream | decode agg | kv% | preempt | steady: one row
    per (label, cohort): a group's cohorts over reps."""
    if not cohorts:
        return None
    rows, sources = [], set()
    for label, c in cohorts:
        sources.add(c.agg_token_source or DASH)
        row = [
            label,
            str(c.n),
            str(c.peak_decoding),
            rate(c.per_stream_tok_s),
            rate(c.agg_tok_s) + ("" if c.steady == c.reps else "*"),
        ]
        if multi:
            row.append(rate(c.agg_chunks_per_s))
        kv = c.kv_peak_perc
        row += [
            DASH if kv is None else f"{kv:.1f} ({secs(c.duration_s)}s)",
            count(c.preemptions),
            f"{c.steady}/{c.reps}",
        ]
        rows.append(tuple(row))
    cols = ["", "streams/rep", "peak decoding", "per-stream", "decode agg"]
    if multi:
        cols.append("agg chunks/s")
    cols += ["kv% peak (over)", "preempt", "steady"]
    return Table(
        "Concurrency (cohort = the streams of one rep; tok/s, medians over reps)",
        tuple(cols),
        tuple(rows),
        (
            *base_notes,
            "streams/rep: the cohort; peak decoding: the most of them decoding at one instant "
            "(first -> last content chunk; a closed loop's seats, or fewer under a server cap)",
            f"decode agg tokens: {', '.join(sorted(sources))}; window = all first tokens -> "
            "first finish; per-stream = the cohort's decode tokens / the sum of each stream's "
            "own decode time",
            "* not steady: no instant had the whole rep decoding; decode agg is then the decode "
            "tokens over the time any stream decoded (= per-stream x the mean streams decoding)",
            "kv% is a peak of polls: compare only between runs of equal length",
        ),
    )


def run_ladder_table(summary: dict[str, Any]) -> Table | None:
    """The ladder table of one run: one row per group."""
    groups = read_groups(summary)
    cohorts = [(g.name, g.cohort) for g in groups if g.cohort is not None]
    return ladder_table(cohorts, any_multi_token(groups), notes(summary))


def whale_table(summary: dict[str, Any]) -> Table | None:
    """whale TTFT | minnow TTFT min/med/max | minnow decode | during/after whale prefill | wall."""
    mixed = read_mixed(summary)
    if mixed is None:
        return None
    rows = [_whale_row(f"rep {rep}", row) for rep, row in mixed.reps]
    if mixed.all_reps is not None:
        rows.append(_whale_row("all reps", mixed.all_reps))
    return Table(
        f"Whale + minnows (whale = {mixed.whale}; minnows = {', '.join(mixed.minnows)})",
        (
            "",
            "whale TTFT",
            "minnow TTFT min/med/max",
            "minnow decode during whale prefill",
            "after",
            "wall",
        ),
        tuple(rows),
        (
            *notes(summary, [mixed.whale, *mixed.minnows]),
            "decode during whale prefill: minnow tokens arriving between its first token and "
            "the whale's; 'queued' = first token only after the whale's prefill",
            "minnows: those in flight during the whale's prefill (its send to its first token)",
        ),
    )


def _whale_row(label: str, row: MixedRow) -> tuple[str, ...]:
    # A cached whale's prefill can end before any minnow is sent: "-" read as a figure lost.
    none = "none in its prefill" if row.minnow_ttft_s.n == 0 else None
    return (
        label,
        secs(row.whale_ttft_s),
        none or triple(row.minnow_ttft_s, secs),
        decode_during(row),
        span(row.minnow_decode_after_tok_s),
        secs(row.wall_s),
    )


def decode_during(row: MixedRow) -> str:
    """The minnows' decode rates during the whale's prefill, and how many only queued."""
    queued = row.minnows_first_token_after_prefill
    return span(row.minnow_decode_during_tok_s) + (f" ({queued} queued)" if queued else "")


def server_table(summary: dict[str, Any]) -> Table:
    srv = read_run(summary).server
    if not srv.available:
        return Table(
            "Server (/metrics)", ("", "value"), (("metrics", srv.note),), left=frozenset({0, 1})
        )
    kv = (
        f"{num(srv.kv_peak_perc)} over {secs(srv.duration_s)} s"
        if srv.polls
        else f"no poll inside the {secs(srv.duration_s)} s window"
    )
    if srv.polled is not None:
        kv += f" (polled {secs(srv.polled.duration_s)} s of it)"
    rows = [
        ("kv% peak of polls", kv),
        ("polls inside", f"{srv.polls} (one every {secs(srv.poll_interval_s)} s)"),
        ("preemptions", count(srv.preemptions)),
    ]
    for key, gauge in (("running", srv.running), ("waiting", srv.waiting)):
        p = gauge.plateau
        plateau = DASH if p is None else f"{p.value:g} for {secs(p.duration_s)} s"
        rows.append((key, f"max {count(gauge.max)}, plateau {plateau}"))
    hit = srv.prefix_hit_rate
    rows.append(("prefix hit rate", DASH if hit is None else f"{100 * hit:.1f} %"))
    rows.append(("generation tok/s (counter)", rate(srv.generation_tok_s)))
    if srv.spec_acceptance is not None:
        rows.append(("spec acceptance", num(srv.spec_acceptance, 3)))
        rows.append(("emitted tokens/step", num(srv.spec_emitted_per_step, 2)))
    if srv.tokens_per_step is not None:
        rows.append(("tokens/emitting step", num(srv.tokens_per_step, 2)))
    return Table(
        "Server (/metrics over the measured phase)",
        ("", "value"),
        tuple(rows),
        (
            "a peak of polls grows with run length: quote kv% with its duration",
            "tokens/emitting step: vllm:iteration_tokens_total, which skips steps that only "
            "prefill and counts a prompt whole at its first token",
        ),
        left=frozenset({0, 1}),
    )


def hist_lines(summary: dict[str, Any]) -> list[str]:
    h = from_json(HistBlock, summary["hist"])
    bad = {g: dict(v) for g, v in h.out_of_range.items() if v}
    lines = [f"histograms: hist/*.hlog ({len(h.files)} files, values in {h.unit})"]
    if bad:
        lowest, highest = h.range_us
        lines.append(f"!! values outside [{lowest}, {highest}] us, not recorded: {bad}")
    return lines


def run_tables(summary: dict[str, Any]) -> list[Table]:
    """Every table of one run's report, in print order."""
    tables = [latency_table(summary), decode_table(summary), reasoning_table(summary)]
    mixed = whale_table(summary)
    tables.append(mixed if mixed is not None else run_ladder_table(summary))
    tables += [verdict_table(summary), waits_table(summary), server_table(summary)]
    tables.append(replicas_table(summary))
    tables += [sessions_table(summary), goodput_table(summary), needle_table(summary)]
    tables.append(dataset_table(summary))
    tables.append(energy_table(summary))
    tables.append(server_log_table(summary))
    tables += benchmark_tables(read_benchmark(summary))
    tables += [percentile_table(summary), seat_wait_table(summary)]
    return [t for t in tables if t is not None]


def render_plain(summary: dict[str, Any]) -> str:
    """report.txt for one run."""
    parts = ["\n".join(header(read_run(summary)))]
    parts += [to_plain(t) for t in run_tables(summary)]
    parts.append("\n".join(hist_lines(summary)))
    return "\n\n".join(parts) + "\n"


def render_rich(tables: list[Table], head: list[str], *, width: int = 120) -> str:
    """The tables as rich renders them on a terminal, captured as text."""
    from rich.console import Console

    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=False, color_system=None)
    for line in head:
        console.print(line, markup=False, highlight=False)
    for t in tables:
        console.print()
        console.print(to_rich(t))
    return buf.getvalue()
