"""The tables of a sweep parent: one row per arm (the load sweep's latency and throughput per
load value; politeness under mixed load; the concurrency ladder when each arm is a cohort size),
then every arm's own report."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

from loadgen.analysis.energy import Energy
from loadgen.analysis.load_sweep import LoadBlock
from loadgen.analysis.summary_types import carried_other_than_one, read_run
from loadgen.analysis.sweep_types import Arm, SweepSummary
from loadgen.report.boot_tables import arms_over_boots_table, boots_table
from loadgen.report.sections import slo_text
from loadgen.report.tables import DASH, Table, msecs, num, rate, secs, span, to_plain
from loadgen.report.text import decode_during, header, ladder_table, render_plain
from loadgen.scenario.load_axis import format_load

# What one load value of each axis is, for the load table's first footnote.
LOAD_AXIS_NOTES = {
    "concurrency": "concurrency: seats of a closed loop, each refilled as its stream ends "
    "(vllm bench serve --max-concurrency)",
    "rate": "rate: Poisson arrivals in requests/s; inf sends every request at once",
}
# The definition behind the load table's tok/s per user column, stated under it.
PER_USER_NOTE = (
    "tok/s per user: median over ok streams of each stream's decode-only rate, decode tokens / "
    "(last - first content chunk) = 1/TPOT: what one user reads once its first token came"
)


def arm_label(arm: Arm) -> str:
    """An arm's server flags and client settings as k=v pairs."""
    return ", ".join(f"{k}={v}" for k, v in sorted(arm.swept.items())) or DASH


def arm_title(name: str, arm: Arm | None) -> str:
    """The arm's name, with its flags and settings when the name does not already say them (the
    name alone for an arm the sweep's summary does not hold)."""
    label = DASH if arm is None else arm_label(arm)
    return name if label in (DASH, name) else f"{name}: {label}"


def arm_titles(s: SweepSummary, names: Iterable[str]) -> list[tuple[str, str]]:
    """(name, title) of the named arms in the sweep's declared order, then the others'."""
    return [(name, arm_title(name, s.arms.get(name))) for name in s.names(names)]


def _varied(s: SweepSummary) -> dict[str, list[str]]:
    """Each flag or setting whose value differs between arms -> its values in arm order."""
    both = [arm.swept for _, arm in s.ordered()]
    keys = sorted({k for b in both for k in b})
    return {
        k: [str(b.get(k, DASH)) for b in both]
        for k in keys
        if len({str(b.get(k, DASH)) for b in both}) > 1
    }


def _drop_flags(flags: list[str], keys: set[str]) -> list[str]:
    """The sim's command line without the flags (and their values) that vary per arm."""
    cli = {"--" + k.replace("_", "-") for k in keys}
    out: list[str] = []
    skip = False
    for f in flags:
        if skip and not f.startswith("--"):
            skip = False
            continue
        skip = f in cli
        if not skip:
            out.append(f)
    return out


def _port(url: str) -> str | None:
    try:
        port = urlsplit(url).port
    except ValueError:
        return None
    return None if port is None else str(port)


def sweep_header(s: SweepSummary, arms: dict[str, dict[str, Any]] | None = None) -> list[str]:
    """The header of a sweep parent: what every arm shares, then what differs per arm (the
    parent's run.target is one arm's, so its flags and port would be quoted as the sweep's)."""
    varied = _varied(s)
    target = s.run.target
    urls = {n: read_run(a).target.url or "" for n, a in (arms or {}).items()}
    ports = {n: _port(u) for n, u in urls.items()}
    per_port = len(set(urls.values())) > 1 and all(ports.values())
    url = target.url
    if per_port and url:
        url = url.rsplit(":", 1)[0] + ":<port per arm>"
    shared = replace(
        target, url=url, written_flags=tuple(_drop_flags(list(target.flags), set(varied)))
    )
    lines = header(replace(s.run, target=shared))
    names = s.names()
    if varied:
        lines.append("per arm: " + "; ".join(f"{k} = {', '.join(v)}" for k, v in varied.items()))
    if per_port:
        lines.append("ports: " + ", ".join(f"{n}={ports[n]}" for n in s.names(ports)))
    if not varied:
        lines.append(f"arms ({len(names)}): {', '.join(names)}")
    return lines


def _speed_note(s: SweepSummary) -> tuple[str, ...]:
    speed = s.run.speed
    return (f"sim speed x{speed:g}",) if speed not in (None, 1.0) else ()


def _source_notes(s: SweepSummary) -> tuple[str, ...]:
    groups = [g for a in s.arms.values() for g in a.groups.values()]
    sources = sorted({g.token_source for g in groups})
    shapes = sorted({g.prompt_shape for g in groups if g.prompt_shape})
    return (
        f"tokens: {', '.join(sources) or DASH}",
        f"prompt shape: {', '.join(shapes) or 'not recorded'}",
        *_speed_note(s),
    )


def politeness_table(s: SweepSummary) -> Table | None:
    """budget | whale TTFT | minnow TTFT | minnow decode during whale prefill | after | wall."""
    rows = tuple(
        (arm_title(name, arm), secs(row.whale_ttft_s), span(row.minnow_ttft_s, secs),
         decode_during(row), span(row.minnow_decode_after_tok_s), secs(row.wall_s))
        for name, arm in s.ordered()
        if (row := arm.row) is not None
    )  # fmt: skip
    if not rows:
        return None
    cols = ("arm (budget)", "whale TTFT", "minnow TTFT", "minnow decode during whale prefill")
    return Table(
        "Politeness across arms (seconds, tok/s)",
        (*cols, "after", "wall"),
        rows,
        (*_source_notes(s), "'queued' = minnows whose first token came after the prefill"),
    )


def sweep_ladder_table(s: SweepSummary) -> Table | None:
    """The concurrency ladder across arms without a whale: one row per arm and group."""
    cohorts = [
        (arm_title(name, arm) if len(arm.groups) == 1 else f"{name}/{g}", v.cohort)
        for name, arm in s.ordered()
        if arm.row is None
        for g, v in sorted(arm.groups.items())
        if v.cohort
    ]
    multi = any(
        carried_other_than_one(g.tokens_per_chunk)
        for a in s.arms.values()
        for g in a.groups.values()
    )
    return ladder_table(cohorts, multi, _source_notes(s))


def arms_energy_table(s: SweepSummary) -> Table | None:
    """Joules per output, prompt and total token across arms, where any arm's GPUs were
    sampled."""
    rows = [
        (arm_title(name, arm), num(e.j_per_output_token, 3), num(e.j_per_prompt_token, 5),
         num(e.j_per_total_token, 5), num(e.energy_j, 0), str(e.output_tokens),
         num(e.mean_power_w, 0), num(e.peak_sm_clock_mhz, 0),
         ", ".join(e.throttle_reasons) or "none")
        for name, arm in s.ordered()
        if isinstance(e := arm.energy, Energy)
    ]  # fmt: skip
    if not rows:
        return None
    return Table(
        "Energy per arm (GPU telemetry over each arm's measured window, all GPUs)",
        ("arm", "J / output token", "J / prompt token", "J / total token", "energy J",
         "output tokens", "mean W", "peak SM MHz", "throttle reasons"),
        tuple(rows),
        ("prompt tokens from the server's usage (prompt_tokens), output tokens from each arm's "
         "token source; total = prompt + output; lower J / token is better at equal tokens; "
         "throttling makes arms unequal",),
    )  # fmt: skip


def load_label(value: Any) -> str:
    """A load value of a sweep's `load` block as the flag took it: 4, 2.5, inf."""
    return format_load(float(value))


def pair(a: float | None, b: float | None) -> str:
    """Two latencies in ms as `p50/p90`."""
    return f"{msecs(a)}/{msecs(b)}"


def load_table(s: SweepSummary) -> Table | None:
    """A load sweep's arms, one row per load value: requests, throughput, TTFT and TPOT p50/p90,
    goodput where an SLO was given, tokens/s per user and the Pareto mark (None for any other
    sweep)."""
    load = s.load
    if load is None:
        return None
    rows = []
    for name, value in zip(load.arms, load.values, strict=True):
        r = s.arms[name].load_row
        good = () if not load.slo else (
            num(r.goodput_req_s, 2),
            DASH if r.attainment is None else f"{100 * r.attainment:.1f}",
        )  # fmt: skip
        rows.append((
            load_label(value), f"{r.requests_ok}/{r.requests_failed}",
            num(r.request_per_s, 2), rate(r.output_tok_s),
            pair(r.ttft_median_ms, r.ttft_p90_ms),
            pair(r.tpot_median_ms, r.tpot_p90_ms), *good,
            rate(r.tok_s_per_user), "*" if name in load.pareto else "",
        ))  # fmt: skip
    good_cols = ("goodput req/s", "SLO met %") if load.slo else ()
    return Table(
        f"Load sweep over {load.axis} (measure phase, all groups)",
        (load.axis, "ok/failed", "req/s", "output tok/s", "TTFT p50/p90 ms",
         "TPOT p50/p90 ms", *good_cols, "tok/s per user", "Pareto"),
        tuple(rows),
        _load_notes(s, load),
        left=frozenset(),
    )  # fmt: skip


def _pct(fraction: float) -> str:
    return f"{100 * fraction:g}%"


def _load_notes(s: SweepSummary, load: LoadBlock) -> tuple[str, ...]:
    rows = [s.arms[n].load_row for n in load.arms]
    sources = sorted({r.output_token_source for r in rows if r.output_token_source})
    slo = load.slo
    return (
        LOAD_AXIS_NOTES[load.axis],
        "req/s, output tok/s: ok requests and their output tokens over the arm's span (first "
        "intended send -> last end); latencies over ok streams, TTFT from the actual send",
        f"output tokens from {', '.join(sources) or DASH}",
        PER_USER_NOTE,
        f"Pareto *: no other arm beats this one by more than {_pct(load.pareto_min_gain)} on tok/s "
        f"per user or output tok/s while trailing it by no more than that on the other (both "
        f"higher-is-better; a gain under {_pct(load.pareto_min_gain)} is within noise)",
        *(
            (f"goodput: requests meeting every SLO ({slo_text(slo)}) per second of the arm's "
             "span; SLO met % = good / all requests, failed ones included",)
            if slo else ()
        ),
        *_speed_note(s),
    )  # fmt: skip


def sweep_tables(s: SweepSummary) -> list[Table]:
    """The across-arm tables of a sweep parent, its answer last (the boot-floor verdicts, then
    a load sweep's load table): the end of a terminal's output is what stays on screen."""
    tables = (
        politeness_table(s),
        sweep_ladder_table(s),
        arms_energy_table(s),
        boots_table(s),
        arms_over_boots_table(s),
        load_table(s),
    )
    return [t for t in tables if t is not None]


def render_sweep_plain(s: SweepSummary, arms: dict[str, dict[str, Any]]) -> str:
    """report.txt of a sweep parent: the across-arm tables, then every arm's report."""
    parts = ["\n".join(sweep_header(s, arms))]
    parts += [to_plain(t) for t in sweep_tables(s)]
    for name, title in arm_titles(s, arms):
        parts.append(f"== arm {title} ==\n" + render_plain(arms[name]).rstrip("\n"))
    return "\n\n".join(parts) + "\n"
