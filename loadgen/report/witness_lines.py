"""The report's second witnesses: in its head, the server's TTFT histogram against the client's
TTFT (added TTFT) and the server's own log lines against the /metrics polls; below, the log's
engine lines as a time series beside the polls."""

from __future__ import annotations

from typing import Any

from loadgen.analysis.added_ttft import AddedTtft, AddedTtftBlock
from loadgen.analysis.server_log import Bounds, LogPoint, RequestCheck, ServerLogWitness
from loadgen.analysis.summary_types import read_run
from loadgen.report.tables import Table

# Disagreeing lines listed one by one before the rest are counted.
MAX_LISTED = 3

ADDERS = "loadgen + network + API server"
NO_HISTOGRAM = (
    "added TTFT: not measured: the server exports no TTFT histogram "
    "(vllm:time_to_first_token_seconds, sglang:time_to_first_token_seconds)"
)


def added_ttft_lines(block: AddedTtftBlock | None, *, virtual: bool = False) -> list[str]:
    """What loadgen, the network and the API server added to each first token, per run and per
    group where a group's requests were alone in flight; `!!` where the server counted other
    requests than the client timed. On the virtual clock nothing but the sim's api_delay_s
    stands between the two."""
    if block is None:
        return []
    if not block.histogram:
        return [NO_HISTOGRAM]
    who = "the sim's API delay (virtual clock: no HTTP path)" if virtual else ADDERS
    lines = [] if block.run is None else [_line(block.run, "per run", who)]
    lines += [_line(g, f"group {g.scope}", who) for g in block.groups]
    if block.groups_note:
        lines.append(f"added TTFT per group: none ({block.groups_note})")
    return lines


def _line(a: AddedTtft, scope: str, who: str) -> str:
    if a.added_ms is None:
        return f"!! added TTFT ({scope}): not measured: {a.note}"
    head = (
        f"{who} added {a.added_ms:.2f} ms per request ({scope}: client "
        f"TTFT mean {a.client_ttft_ms:.2f} ms - server histogram mean {a.server_ttft_ms:.2f} ms "
        f"over {a.streams} streams, {a.windows} window{'s' if a.windows > 1 else ''})"
    )
    return head if a.matched else f"!! {head}: {a.note}; the means cover different requests"


def server_log_lines(w: ServerLogWitness | None) -> list[str]:
    """The server's engine lines against the polls: how many agree, and `!!` for each that
    does not (the first few, then a count)."""
    if w is None:
        return []
    if w.kind == "none":
        return [
            "server log: kept as server.log; no vLLM engine line or llama.cpp request timing in it"
        ]
    if w.kind == "llama.cpp":
        return request_lines(w)
    if not w.points:
        return [f"server log: {w.lines} vLLM engine lines, none on the polled run: no witness"]
    judged, bad = w.judged, w.disagreeing
    gaps = [abs(p.gen_tok_s / p.metrics_gen_mid_tok_s - 1) for p in judged
            if p.metrics_gen_mid_tok_s]  # fmt: skip
    within = f", generation throughput within {max(gaps):.1%} of /metrics" if gaps else ""
    phase = "anywhere in its second" if w.phase_s is None else f"{w.phase_s:.2f} s into its second"
    lines = [
        f"server log: {len(w.points)} vLLM engine lines (every {w.interval_s:g} s, each logged "
        f"{phase}) beside /metrics: {len(judged) - len(bad)} of {len(judged)} judged agree within "
        f"the polls' resolution{within}"
    ]
    return lines + _listed([_disagreement(p) for p in bad], "lines disagree with /metrics")


def _disagreement(p: LogPoint) -> str:
    said = [f"generation {p.gen_tok_s:.1f} tok/s", f"running {p.running}", f"waiting {p.waiting}"]
    polls = [_range(p.metrics_gen_tok_s, "tok/s"), f"running {_count(p.metrics_running)}",
             f"waiting {_count(p.metrics_waiting)}"]  # fmt: skip
    return (
        f"!! server log disagrees with /metrics at {p.t_s:.0f} s: the log says "
        f"{', '.join(said)}; the polls allow {', '.join(polls)}"
    )


def _range(b: Bounds | None, unit: str) -> str:
    if b is None:
        return "-"
    return f"{b.low:.1f}-{b.high:.1f}{' ' + unit if unit else ''}"


def _count(b: Bounds | None) -> str:
    """A gauge's range over polls of whole requests: "4", or "0-4"."""
    if b is None:
        return "-"
    return f"{b.low:g}" if b.low == b.high else f"{b.low:g}-{b.high:g}"


def request_lines(w: ServerLogWitness) -> list[str]:
    """llama.cpp's request timings against the streams they were joined to."""
    if w.requests_note is not None:
        return [f"!! server log: {w.requests_note}"]
    bad = [c for c in w.requests if not c.agrees]
    gaps = [abs(c.eval_ms - c.client_decode_ms) for c in w.requests
            if c.client_decode_ms is not None]  # fmt: skip
    worst = f", eval time within {max(gaps):.1f} ms of the client's decode span" if gaps else ""
    lines = [
        f"server log: {len(w.requests)} llama.cpp request timings joined to loadgen's streams: "
        f"{len(w.requests) - len(bad)} agree on tokens and decode time{worst}"
    ]
    return lines + _listed([_request_disagreement(c) for c in bad], "request timings disagree")


def _request_disagreement(c: RequestCheck) -> str:
    client = "-" if c.client_decode_ms is None else f"{c.client_decode_ms:.1f} ms"
    return (
        f"!! server log disagrees on stream {c.stream} (task {c.task}): the server generated "
        f"{c.eval_tokens} tokens in {c.eval_ms:.1f} ms, loadgen counted {c.completion_tokens} "
        f"tokens over {client}"
    )


def _listed(flagged: list[str], what: str) -> list[str]:
    """The first MAX_LISTED `!!` lines, then how many more there were."""
    more = len(flagged) - MAX_LISTED
    return flagged[:MAX_LISTED] + ([f"!! server log: {more} more {what}"] if more > 0 else [])


def server_log_table(summary: dict[str, Any]) -> Table | None:
    """The engine lines beside what the polls allow, one row a line (None: no engine line)."""
    w = read_run(summary).server_log
    if w is None or not w.points:
        return None
    rows = tuple(
        (
            f"{p.t_s:.2f}", f"{p.gen_tok_s:.1f}",
            "-" if p.metrics_gen_mid_tok_s is None else f"{p.metrics_gen_mid_tok_s:.1f}",
            _range(p.metrics_gen_tok_s, ""), f"{p.running}/{p.waiting}",
            f"{_count(p.metrics_running)} / {_count(p.metrics_waiting)}",
            f"{p.kv_perc:.1f}", "-" if p.prefix_hit_perc is None else f"{p.prefix_hit_perc:.1f}",
            {True: "yes", False: "!! no", None: "-"}[p.agrees],
        )
        for p in w.points
    )  # fmt: skip
    return Table(
        "Server log: vLLM engine lines beside /metrics",
        ("t s", "log gen tok/s", "polls gen tok/s", "polls allow", "log run/wait",
         "polls run / wait", "log KV %", "log prefix hit %", "agrees"),
        rows,
        (f"one line every {w.interval_s:g} s; t is the line's instant on the run clock; the "
         "polls' figure is their counter's rise over the line's interval, interpolated",),
        left=frozenset({8}),
    )  # fmt: skip
