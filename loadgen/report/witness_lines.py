"""The report head's second witnesses: the server's TTFT histogram against the client's TTFT
(added TTFT), and the server's own log lines against the /metrics polls."""

from __future__ import annotations

from loadgen.analysis.added_ttft import AddedTtft, AddedTtftBlock

NO_HISTOGRAM = (
    "added TTFT: not measured: the server exports no TTFT histogram "
    "(vllm:time_to_first_token_seconds, sglang:time_to_first_token_seconds)"
)


def added_ttft_lines(block: AddedTtftBlock | None) -> list[str]:
    """What loadgen, the network and the API server added to each first token, per run and per
    group where a group's requests were alone in flight; `!!` where the server counted other
    requests than the client timed."""
    if block is None:
        return []
    if not block.histogram:
        return [NO_HISTOGRAM]
    lines = [] if block.run is None else [_line(block.run, "per run")]
    lines += [_line(g, f"group {g.scope}") for g in block.groups]
    if block.groups_note:
        lines.append(f"added TTFT per group: none ({block.groups_note})")
    return lines


def _line(a: AddedTtft, scope: str) -> str:
    if a.added_ms is None:
        return f"!! added TTFT ({scope}): not measured: {a.note}"
    head = (
        f"loadgen + network + API server added {a.added_ms:.2f} ms per request ({scope}: client "
        f"TTFT mean {a.client_ttft_ms:.2f} ms - server histogram mean {a.server_ttft_ms:.2f} ms "
        f"over {a.streams} streams, {a.windows} window{'s' if a.windows > 1 else ''})"
    )
    return head if a.matched else f"!! {head}: {a.note}; the means cover different requests"
