"""A capacity search's report: the answer and its interval, what binds at the first failing
load and what would move it, every step in search order, and capacity.png (each SLO item's
attainment against the load, its target share dashed, the answer marked)."""

from __future__ import annotations

from typing import Any

from loadgen.analysis.capacity_types import Boundary, CapacitySummary, read_capacity
from loadgen.report.tables import DASH, Table
from loadgen.scenario.load_axis import format_load

CAPACITY_PNG = "capacity.png"


def _load(value: float | None, over: str) -> str:
    if value is None:
        return DASH
    return format_load(value) + (" req/s" if over == "rate" else "")


def ended_text(c: CapacitySummary) -> str:
    """How the search ended, as the head line says it."""
    unresolved = "before the boundary was resolved"
    if c.ended == "max_steps":
        return f"stopped by --max-steps {c.search.max_steps} {unresolved}"
    if c.ended == "max_time":
        return f"stopped by --max-time {c.max_time_s:g} s {unresolved}"
    if c.ended == "interrupted":
        return f"interrupted {unresolved}"
    return {
        "resolved": "resolved",
        "holds_at_max": "holds at --max: the SLO is met at every load tried",
        "fails_at_min": "fails at --min: no load tried meets the SLO",
    }[c.ended]


def move_text(b: Boundary) -> str:
    """What binds at the first failing load, and what would move the boundary."""
    ev = b.evidence
    budget = "" if ev.budget is None else f" (max_num_batched_tokens {ev.budget})"
    if b.cause == "admission_cap":
        return (f"seats: max_num_seqs {ev.cap} ({ev.cap_source}) is full at {b.at}; more seats "
                "(or a smaller load) move the boundary")  # fmt: skip
    if b.cause == "prefill_hol":
        prompts = ", ".join(f"{p.group} ({p.prompt_tokens} tokens)" for p in ev.prefilling)
        return ("prefill head-of-line: the missed streams waited behind the prefill of "
                f"{prompts or 'other prompts'}; a smaller prefill budget{budget} shares it, or "
                "those prompts go to another server")  # fmt: skip
    if b.cause == "pool_pressure":
        return (f"KV pool pressure: kv% peaked at {_number(ev.kv_peak_perc)} with "
                f"{_number(ev.preemptions)} preemptions at {b.at}; a larger pool (num_gpu_blocks"
                " / gpu_memory_utilization) or shorter contexts move the boundary")  # fmt: skip
    if b.cause == "rationed_decode":
        return ("rationed decode: decode crawled while other prompts prefilled; a smaller "
                f"prefill budget{budget} rations it less")  # fmt: skip
    if b.cause == "client_limited":
        return "the client itself: loadgen's own timing error exceeded its tolerance; add --workers"
    if b.cause == "error":
        return "requests failed at this load: see the step's report for the errors"
    if b.cause == "own_prefill":
        ttft = "?" if ev.ttft_p50_ms is None else f"{ev.ttft_p50_ms:.1f}"
        return ("the prompts' own prefill: every missed stream was admitted without a wait the "
                f"verdicts can blame and missed on TTFT alone (p50 {ttft} ms); "
                "shorter prompts, a faster prefill or a looser TTFT limit move the boundary, not "
                "seats or budget")  # fmt: skip
    if b.cause == "decode_batch":
        return ("every missed stream was admitted without a wait the verdicts can blame: the "
                "batch's own step time (TPOT grows with the batch); a faster server or a looser "
                "SLO moves the boundary")  # fmt: skip
    return "no stream missed the SLO"


def _number(value: float | None) -> str:
    return "?" if value is None else f"{value:g}"


def _runs_text(c: CapacitySummary, value: float) -> str:
    """'pooled over N run(s)', and how many met the SLO alone where the runs disagree: a load
    is judged on its runs pooled, so one run's miss can sit under a pooled pass."""
    n = c.runs_at.get(format_load(value), 0)
    alone = sum(p.passes for p in c.steps if format_load(p.value) == format_load(value))
    return f"pooled over {n} run(s)" + ("" if alone in (0, n) else f", {alone} of {n} met it alone")


def capacity_head(c: CapacitySummary) -> list[str]:
    """The lines a reader needs first: what was searched, the answer, the cause."""
    over = c.over
    slo = ", ".join(f"{i.name} <= {i.limit:g} {i.unit}" for i in c.slo)
    who = f"group {c.group}'s count" if c.group else over
    lines = [
        f"loadgen capacity: scenario {c.scenario} | target {c.target.url or DASH} "
        f"({c.target.kind or DASH}) | clock {c.clock}",
        f"searched: {who} from {_load(c.search.lo, over)} to {_load(c.search.hi, over)}; "
        f"SLO {slo}" + (f" (judged on group {c.group})" if c.group else " (judged on every group)"),
    ]
    lo, hi = c.capacity, c.first_fail
    if lo is None:
        lines.append(f"capacity: below {_load(hi, over)} ({ended_text(c)})")
    elif hi is None:
        lines.append(f"capacity: at least {_load(lo, over)} ({ended_text(c)})")
    else:
        lines.append(
            f"capacity: {_load(lo, over)} (meets the SLO {_runs_text(c, lo)}; "
            f"{_load(hi, over)} misses it {_runs_text(c, hi)}; interval "
            f"[{_load(lo, over)}, {_load(hi, over)}); {ended_text(c)})"
        )
    b = c.boundary
    if b:
        lines.append(f"binds at {_load(hi, over)}: {b.cause}: {move_text(b)}")
        counts = ", ".join(f"{v} {n}" for v, n in b.evidence.verdicts.items())
        lines.append(f"  verdicts of the {b.evidence.missed} streams that missed: {counts}")
    if c.interrupted:
        lines.append("!! interrupted: the search stopped before it ended")
    return lines


def steps_table(c: CapacitySummary) -> Table:
    per_item = [f"{i.name} ({i.unit}) / within" for i in c.slo]
    cols = ("#", c.over, "repeat", "streams", "good", *per_item, "meets", "verdicts")
    rows = []
    for p in c.steps:
        cells = [str(p.order), _load(p.value, c.over), str(p.repeat), str(p.n), str(p.good)]
        for i in c.slo:
            got = p.items[i.name]
            value = DASH if got.value is None else f"{got.value:.4g}"
            cells.append(f"{value} / {got.attainment:.0%}")
        cells.append("yes" if p.passes else "no")
        cells.append(", ".join(f"{v} {n}" for v, n in p.verdicts.items()))
        rows.append(tuple(cells))
    notes = (
        "within: the share of judged streams inside the item's limit (failed streams never "
        "are); a load meets the SLO when every share reaches its pNN, its runs pooled",
        "a value is the nearest-rank pNN of the step's streams (- when it falls on a miss)",
        "step directories: steps/<#>-<load>[.r<repeat>]/ (each a run directory)",
    )
    left = frozenset({0, len(cols) - 1})
    return Table("Capacity steps (search order)", cols, tuple(rows), notes, left)


def capacity_plain(summary: dict[str, Any]) -> str:
    from loadgen.report.tables import to_plain

    c = read_capacity(summary)
    return "\n".join(capacity_head(c)) + "\n\n" + to_plain(steps_table(c)) + "\n"


def capacity_figure(summary: dict[str, Any]) -> bytes | None:
    """capacity.png: attainment per SLO item against the load; None with no step."""
    c = read_capacity(summary)
    if not c.steps:
        return None
    from matplotlib.figure import Figure

    from loadgen.report.plots import png_bytes

    fig = Figure(figsize=(7, 4))
    ax = fig.add_subplot()
    for k, item in enumerate(c.slo):
        points = sorted((p.value, p.items[item.name].attainment) for p in c.steps)
        ax.plot([x for x, _ in points], [y * 100 for _, y in points], "o-", color=f"C{k}",
                label=f"{item.name} <= {item.limit:g} {item.unit}")  # fmt: skip
        ax.axhline(item.share * 100, color=f"C{k}", linestyle="--", linewidth=0.8)
    if c.capacity is not None:
        ax.axvline(c.capacity, color="0.3", linestyle=":", label=f"capacity {c.capacity:g}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel(c.over + (" (req/s)" if c.over == "rate" else " (streams in flight)"))
    ax.set_ylabel("streams within the limit (%)")
    ax.set_ylim(-5, 105)
    ax.legend(fontsize="small")
    ax.set_title(f"{c.scenario}: SLO attainment by load")
    return png_bytes(fig)
