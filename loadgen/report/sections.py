"""The report tables of sections a run has only sometimes: sessions, goodput, reasoning,
needles, dataset prompts and GPU energy; each is None where the run has nothing to show."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loadgen.analysis.datasets import read_datasets
from loadgen.analysis.energy import Energy, EnergyNote, read_energy
from loadgen.analysis.goodput import GroupGoodput, read_goodput
from loadgen.analysis.needles import read_needles
from loadgen.analysis.replicas import ReplicaRow, ReplicasBlock
from loadgen.analysis.sessions import read_sessions
from loadgen.analysis.slo import SloItem
from loadgen.analysis.summary_types import read_groups
from loadgen.codec import from_json
from loadgen.needle import RECALL_CAVEAT
from loadgen.report.tables import DASH, Table, count, msecs, num, rate, secs, text_or_dash, triple


def sessions_table(summary: dict[str, Any]) -> Table | None:
    """Per session group and turn: context, prefix hits, new tokens, TTFT, decode rate."""
    sessions = read_sessions(summary)
    tools = any(t.tool_calls for turns in sessions.values() for t in turns)
    rows = []
    for group, turns in sessions.items():
        for t in turns:
            hit = t.hit_share
            row: tuple[str, ...] = (
                group, str(t.turn), f"{t.ok}/{t.sessions}", count(t.prompt_tokens),
                count(t.cached_tokens), count(t.new_tokens),
                DASH if hit is None else f"{100 * hit:.1f}", secs(t.ttft_s),
                rate(t.decode_tok_s),
            )  # fmt: skip
            if tools:
                row += (str(t.tool_calls), secs(t.tool_s), secs(t.result_ttft_s))
            rows.append(row)
    if not rows:
        return None
    extra = ("tool calls", "in tool s", "result TTFT s") if tools else ()
    return Table(
        "Sessions per turn (medians over sessions)",
        (
            "group",
            "turn",
            "ok",
            "context tok",
            "cached tok",
            "new tok",
            "hit %",
            "TTFT s",
            "decode tok/s",
            *extra,
        ),
        tuple(rows),
        (
            "tokens from usage: prompt_tokens and prompt_tokens_details.cached_tokens (- when the "
            "server does not report it); new = prompt - cached",
        ),
    )


def goodput_table(summary: dict[str, Any]) -> Table | None:
    """Per group: requests meeting every SLO, goodput beside throughput (requests/s), and the
    share within each SLO against its pNN."""
    g = read_goodput(summary)
    if g is None:
        return None
    items = g.items
    rows = tuple(
        (
            group, f"{v.good}/{v.n}",
            DASH if v.attainment is None else f"{100 * v.attainment:.1f}",
            num(v.goodput_req_s, 3), num(v.throughput_req_s, 3), secs(v.span_s),
            "; ".join(_item_met(v, i) for i in items),
        )
        for group, v in g.groups.items()
    )  # fmt: skip
    slo = ", ".join(f"{i.name} <= {i.limit:g} {i.unit}" for i in items)
    return Table(
        "Goodput (requests meeting every SLO)",
        ("group", "good/n", "SLO met %", "goodput req/s", "throughput req/s", "span s",
         "within each SLO %"),
        rows,
        (
            f"SLO: {slo}; pNN: the share of a group's streams that must be within it; TTFT and "
            "E2E from the actual send, TPOT = decode window / decode tokens; per group span: "
            "first intended send -> last end (vLLM's goodput)",
        ),
        left=frozenset({0, 6}),
    )  # fmt: skip


def _item_met(v: GroupGoodput, item: SloItem) -> str:
    """`ttft_p90 95.0 yes`: the group's share within one SLO and whether it reaches its pNN."""
    share = v.within.get(item.key, 0) / v.n if v.n else 0.0
    return f"{item.name} {100 * share:.1f} {'yes' if v.holds(item.key, item.share) else 'NO'}"


def slo_text(slo: Mapping[str, float]) -> str:
    """The SLOs as the reports state them: `ttft_s <= 2, tpot_ms <= 50`."""
    return ", ".join(f"{k} <= {v:g}" for k, v in slo.items())


def reasoning_table(summary: dict[str, Any]) -> Table | None:
    """Per group whose streams reasoned: TTFT beside TTFO, reasoning tokens and their source,
    reasoning and output decode rates apart (None when no stream reasoned)."""
    reasoned = [(g, g.reasoning) for g in read_groups(summary) if g.reasoning is not None]
    rows = tuple(
        (
            g.name, f"{r.streams}/{g.n}", triple(g.of("ttft_s"), secs), triple(r.ttfo_s, secs),
            count(r.reasoning_tokens.median), r.reasoning_token_source,
            rate(r.reasoning_tok_s.median), rate(r.output_tok_s.median),
        )
        for g, r in reasoned
    )  # fmt: skip
    if not rows:
        return None
    notes = [
        "TTFT: first token of any kind; TTFO: first output token (reasoning excluded); "
        "decode rates split at the first output chunk, each without its first chunk's tokens",
    ]
    if any(r.estimated for _, r in reasoned):
        notes.append(
            "!! reasoning tokens estimated (no usage.completion_tokens_details.reasoning_tokens):"
            " see the source column"
        )
    return Table(
        "Reasoning (TTFO and decode rates, reasoning vs output)",
        ("group", "reasoned", "TTFT s min/med/max", "TTFO s min/med/max", "reasoning tok",
         "source", "reasoning tok/s", "output tok/s"),
        tuple(rows),
        tuple(notes),
    )  # fmt: skip


def needle_table(summary: dict[str, Any]) -> Table | None:
    """Per group (and arm) with needle prompts: the planted code found in the answer."""
    needles = read_needles(summary)
    if not needles:
        return None
    rows = tuple(
        (
            n.group, n.arm or DASH, f"{n.hits}/{n.streams - n.errors}",
            DASH if n.recall is None else f"{100 * n.recall:.1f}", str(n.errors),
        )
        for n in needles
    )  # fmt: skip
    return Table(
        "Needle recall (planted code in the answer)",
        ("group", "arm", "hits/answered", "recall %", "errors"),
        rows,
        ("exact match: the expected code appears in the answer text", RECALL_CAVEAT),
    )


def dataset_table(summary: dict[str, Any]) -> Table | None:
    """Per dataset group: its rows, and the prompt tokens asked beside the server's count."""
    datasets = read_datasets(summary)
    if not datasets:
        return None
    rows = tuple(
        (
            d.group, f"{d.path.rsplit('/', 1)[-1]} ({d.format})",
            f"{d.rows_read}/{d.rows_filtered}/{d.rows_skipped}", d.cache, str(d.streams),
            text_or_dash(d.asked_tokens), text_or_dash(d.sent_tokens),
            text_or_dash(d.server_tokens), text_or_dash(d.salt_tokens),
        )
        for d in datasets
    )  # fmt: skip
    return Table(
        "Dataset prompts (prompt tokens asked, sent and counted by the server)",
        ("group", "file", "rows read/filtered/too long", "cache", "ok streams", "asked",
         "sent", "server", "salt tags"),
        rows,
        ("asked: each row counted alone on the run's counter (the server's /tokenize where it "
         "has one); sent: what loadgen sent, salt tag included, on that counter; server: usage "
         "prompt_tokens; salt tags: server minus asked (0 when shared)",
         "filtered: outside the length limits; too long: past the target's max_model_len, "
         "skipped (too_long: skip)"),
    )  # fmt: skip


def prompt_count(e: Energy) -> str:
    """The prompt tokens counted, or a dash where a stream's count is unknown."""
    return DASH if e.prompt_tokens_missing else str(e.prompt_tokens)


def prompt_source(e: Energy) -> str:
    """Where the prompt tokens come from, or why per prompt token is unknown."""
    if e.prompt_tokens_missing:
        return (
            f"prompt tokens unknown: {e.prompt_tokens_missing} of {e.streams} streams had no "
            "usage prompt_tokens"
        )
    return (
        "prompt tokens from the server's usage (prompt_tokens); J/total tok: over prompt + "
        "output tokens"
    )


def energy_table(summary: dict[str, Any]) -> Table | None:
    """GPU energy over the measured window (telemetry.jsonl), or why there was none."""
    e, why = read_energy(summary.get("energy")), tuple(summary.get("telemetry_notes") or ())
    if e is None:
        return Table("GPU energy", ("source",), (("none",),), why) if why else None
    source = e.source or DASH
    if isinstance(e, EnergyNote):
        return Table("GPU energy", ("source",), ((source,),), (e.note, *why))
    row = (
        source, str(e.gpus), num(e.energy_j, 1), prompt_count(e), str(e.output_tokens),
        *(num(j, 4) for j in (e.j_per_prompt_token, e.j_per_output_token, e.j_per_total_token)),
        num(e.mean_power_w, 1),
        DASH if e.peak_sm_clock_mhz is None else num(e.peak_sm_clock_mhz, 0),
        ", ".join(e.throttle_reasons) or "none",
    )  # fmt: skip
    return Table(
        "GPU energy (measured window)",
        ("source", "GPUs", "energy J", "prompt tokens", "output tokens", "J/prompt tok",
         "J/output tok", "J/total tok", "mean W", "peak SM MHz", "throttle reasons"),
        (row,),
        (
            f"energy from the {e.energy_method.replace('_', ' ')} over "
            f"{e.window_s:.3g} s, all GPUs; output tokens from {', '.join(e.token_sources)}, "
            + prompt_source(e),
            *why,
        ),
        left=frozenset({0, 10}),
    )  # fmt: skip


def replicas_table(summary: dict[str, Any]) -> Table | None:
    """Per replica of a routed run: streams, ok and errors, ok req/s, TTFT p50/p90, verdicts,
    its prefix hit rate from its own /metrics, and when it failed; the total below."""
    raw = summary.get("replicas")
    if raw is None:
        return None
    block = from_json(ReplicasBlock, raw)

    def row(r: ReplicaRow) -> tuple[str, ...]:
        name = "total" if r.replica is None else f"{r.replica} {r.url}"
        errors = ", ".join(f"{cls} x{n}" for cls, n in r.errors.items()) or DASH
        verdicts = ", ".join(f"{v} {n}" for v, n in r.verdicts.items()) or DASH
        hit = DASH if r.prefix_hit_rate is None else f"{100 * r.prefix_hit_rate:.1f}"
        failed = DASH if r.failed_at_s is None else f"{r.failed_at_s:.3f} s ({r.failed_class})"
        return (name, str(r.streams), str(r.ok), errors, num(r.ok_req_s, 2),
                msecs(r.ttft_p50_ms), msecs(r.ttft_p90_ms),
                verdicts, hit, failed)  # fmt: skip

    notes = [
        f"!! replica {r.replica} ({r.url}) failed at {r.failed_at_s:.3f} s: its first "
        f"{r.failed_class} stream; {r.streams - r.ok} of its {r.streams} streams failed"
        for r in block.rows
        if r.failed_at_s is not None
    ]
    route = block.route
    if route == "prefix-hash":
        route += f" (first {block.prefix_blocks} blocks of {block.block_chars} characters)"
    notes += [
        f"route: {route}; measured streams; hit %: the replica's prefix_cache_hits / queries "
        "deltas over the run's span (total: the replicas' summed counters)",
        "failed: the end of its first stream refused or cut (connect_error, connect_timeout, "
        "connection_closed) after which it completed none",
    ]
    return Table(
        "Replicas",
        ("replica", "streams", "ok", "errors", "ok req/s", "TTFT p50 ms", "TTFT p90 ms", "verdicts",
         "hit %", "failed at"),
        (*(row(r) for r in block.rows), row(block.total)),
        tuple(notes),
        left=frozenset({0, 3, 7}),
    )  # fmt: skip
