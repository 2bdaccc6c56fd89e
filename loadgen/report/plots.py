"""The report's figures as PNG bytes (matplotlib's Agg canvas; no pyplot, no global state).

- stream timeline: one row per stream; late (intended -> sent), queued (sent -> the end of
  its wait: the verdict's last cap, head-of-line or pool phase, else the modelled admission),
  prefill (-> first token), decode (first -> last token), coloured by verdict;
- latency percentile curves read from the HDR histograms (TTFT from intended and from actual
  send; ITL per token and per chunk);
- the metrics timeline: running / waiting, kv%, and generation tok/s from the counter.
PNG metadata is stripped so the same run renders the same bytes.
"""

from __future__ import annotations

import io
from itertools import pairwise

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from loadgen.analysis.evidence import held_phases
from loadgen.analysis.hist import GroupHistograms, percentile_curve
from loadgen.analysis.summary_types import StreamRow
from loadgen.analysis.timeline import Timeline

NS = 1_000_000_000
VERDICT_COLOURS = {
    "admitted": "#2a9d8f",
    "admission_cap": "#e9a23b",
    "prefill_hol": "#d1495b",
    "rationed_decode": "#7b4fa3",
    "pool_pressure": "#1d5fa8",
    "client_limited": "#8d8d8d",
    "error": "#222222",
}
# Segment kind -> opacity: the stream's own decode is solid, waiting is faint.
SEGMENT_ALPHA = {"late": 0.15, "queued": 0.3, "prefill": 0.6, "decode": 1.0}
MAX_TIMELINE_ROWS = 400
PERCENTILES = (0, 50, 75, 90, 95, 99, 99.5, 99.9, 99.99)
DPI = 100


def png_bytes(fig: Figure) -> bytes:
    """The figure as PNG bytes, metadata stripped (the same figure renders the same bytes)."""
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def _margins(
    fig: Figure, *, left: float, right: float, top: float, bottom: float, **space: float
) -> None:
    """Fixed margins in inches around the axes, for labels, titles and an outside legend.
    tight_layout measured every label by drawing the figure an extra time: 40% of a sweep
    report's CPU."""
    w, h = fig.get_size_inches()
    fig.subplots_adjust(
        left=left / w, right=1 - right / w, top=1 - top / h, bottom=bottom / h, **space
    )


# Wait phases (verdicts.py) in which the stream was held, not yet in its own prefill.
_HELD = frozenset({"admission_cap", "prefill_hol", "pool_pressure"})


def queued_until_s(s: StreamRow) -> float | None:
    """Where a stream's queueing ended: the end of the last phase of its verdict's excess-wait
    decomposition that held it (a seat cap, another request's prefill, the pool), else its
    modelled admission. whale_c4's minnows hold a seat at once yet wait 6.3 s behind the
    whale's prefill (the server counts them waiting): their admission alone drew it as prefill."""
    held = [p.to_s for p in held_phases(s.typed_evidence) if p.state in _HELD]
    admit = s.t_admit_s
    if not held:
        return admit
    return max(held[-1], admit) if admit is not None else held[-1]


def _segments(s: StreamRow) -> list[tuple[str, float, float]]:
    """(kind, start_s, end_s) of one stream's row."""
    t_int, sent, admit = s.t_intended_s, s.t_sent_s, queued_until_s(s)
    first, last, done = s.t_first_s, s.t_last_s, s.t_done_s
    out = []
    if sent is not None and sent > t_int:
        out.append(("late", t_int, sent))
    if sent is not None and admit is not None and admit > sent:
        out.append(("queued", sent, admit))
    start = admit if admit is not None else sent
    end_prefill = first if first is not None else done
    if start is not None and end_prefill is not None and end_prefill > start:
        out.append(("prefill", start, end_prefill))
    if first is not None and last is not None:
        out.append(("decode", first, max(last, first + 1e-3)))
    return out


def timeline_legend_kinds(rows: list[StreamRow]) -> list[str]:
    """The segment kinds the rows draw, in legend order: a legend lists only what appears."""
    drawn = {kind for s in rows for kind, _, _ in _segments(s)}
    return [k for k in SEGMENT_ALPHA if k in drawn]


def timeline_png(streams: list[StreamRow]) -> bytes | None:
    """The stream timeline (module docstring); None without streams."""
    rows = streams[:MAX_TIMELINE_ROWS]
    if not rows:
        return None
    height = min(2.0 + 0.22 * len(rows), 30.0)
    fig = Figure(figsize=(13, height))
    ax = fig.add_subplot()
    # One collection per (colour, kind) rather than one artist per segment: thousands of
    # artists made this figure the report's slowest; segments never overlap, so it looks the same.
    boxes: dict[tuple[str, str], list[list[tuple[float, float]]]] = {}
    for y, s in enumerate(rows):
        colour = VERDICT_COLOURS.get(s.verdict, "#000000")
        for kind, a, b in _segments(s):
            corners = [(a, y - 0.4), (a, y + 0.4), (b, y + 0.4), (b, y - 0.4)]
            boxes.setdefault((colour, kind), []).append(corners)
    for (colour, kind), polys in boxes.items():
        ax.add_collection(PolyCollection(polys, facecolors=colour, alpha=SEGMENT_ALPHA[kind]))
    ax.autoscale_view()
    ax.set_ylim(len(rows) - 0.5, -0.5)
    if len(rows) <= 60:
        ax.set_yticks(range(len(rows)), [f"{s.id} ({s.group})" for s in rows], fontsize=8)
    else:
        ax.set_yticks([])
        ax.set_ylabel("streams (by intended send time)")
    ax.set_xlabel("run time (s)")
    ax.grid(axis="x", alpha=0.3)
    present = sorted({s.verdict for s in rows}, key=list(VERDICT_COLOURS).index)
    handles = [Patch(color=VERDICT_COLOURS[v], label=v) for v in present]
    handles += [
        Patch(color="#555555", alpha=SEGMENT_ALPHA[k], label=k) for k in timeline_legend_kinds(rows)
    ]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    title = "Stream timeline: late, queued, prefill, decode; colour = verdict"
    if len(streams) > len(rows):
        title += f" (first {len(rows)} of {len(streams)})"
    ax.set_title(title)
    _margins(fig, left=2.3 if len(rows) <= 60 else 0.6, right=1.9, top=0.45, bottom=0.6)
    return png_bytes(fig)


def _x(p: float) -> float:
    """Percentile -> x for a log 'nines' axis: 1 / (1 - p)."""
    return 1.0 / (1.0 - min(p, 99.999) / 100.0)


def percentiles_png(histograms: dict[str, GroupHistograms]) -> bytes | None:
    """TTFT and ITL percentile curves per group from the HDR histograms; None when empty."""
    if not histograms:
        return None
    fig = Figure(figsize=(13, 4.8))
    panels = (
        ("TTFT (ms)", (("ttft_corrected", "-", "from intended"), ("ttft_uncorrected", "--", ""))),
        (
            "inter-token latency (ms)",
            (("itl_token", "-", "per token"), ("itl_chunk", ":", "chunk")),
        ),
    )
    drew = False
    for i, (label, metrics) in enumerate(panels):
        ax = fig.add_subplot(1, 2, i + 1)
        values: list[float] = []
        for j, group in enumerate(sorted(histograms)):
            colour = f"C{j % 10}"
            for metric, style, what in metrics:
                curve = percentile_curve(histograms[group].merged(metric), PERCENTILES)
                if not curve:
                    continue
                drew = True
                name = f"{group} {what or metric.split('_')[1]}".strip()
                ys = [v / 1e3 for _, v in curve]
                values += ys
                ax.plot([_x(p) for p, _ in curve], ys, style, color=colour, label=name)
        ax.set_xscale("log")
        # Groups an order of magnitude apart (whale vs minnows) each stay readable.
        positive = [v for v in values if v > 0]
        if positive and max(positive) > 20 * min(positive):
            ax.set_yscale("log")

        ticks = (50, 90, 99, 99.9, 99.99)
        ax.set_xticks([_x(p) for p in ticks], [f"p{p:g}" for p in ticks])
        ax.set_ylabel(label)
        ax.set_xlabel("percentile (HdrHistogram)")
        ax.grid(alpha=0.3)
        if values:
            ax.legend(fontsize=8)
    if not drew:
        return None
    _margins(fig, left=0.9, right=0.25, top=0.2, bottom=0.6, wspace=0.2)
    return png_bytes(fig)


def metrics_png(timeline: Timeline) -> bytes | None:
    """Running / waiting, kv%, generation tok/s over run time; None without metrics."""
    if not timeline.available:
        return None
    fig = Figure(figsize=(13, 7.5))
    axes = fig.subplots(3, 1, sharex=True)
    for name, label, colour in (
        ("num_requests_running", "running", "C0"),
        ("num_requests_waiting", "waiting", "C3"),
    ):
        ts, vs = timeline.series(name)
        axes[0].step([t / NS for t in ts], vs, where="post", label=label, color=colour)
    axes[0].set_ylabel("requests")
    axes[0].legend(fontsize=8, loc="upper right")
    ts, vs = timeline.series("kv_cache_usage_perc")
    axes[1].plot([t / NS for t in ts], [v * 100 for v in vs], color="C2")
    axes[1].fill_between([t / NS for t in ts], [v * 100 for v in vs], alpha=0.2, color="C2")
    axes[1].set_ylabel("kv %")
    axes[1].set_ylim(0, 105)
    ts, vs = timeline.series("generation_tokens_total")
    mids, tok_s = [], []
    for (t0, v0), (t1, v1) in pairwise(zip(ts, vs, strict=True)):
        if t1 > t0:
            mids.append((t0 + t1) / 2 / NS)
            tok_s.append((v1 - v0) * NS / (t1 - t0))
    axes[2].plot(mids, tok_s, color="C1", marker=".", markersize=3)
    axes[2].set_ylabel("generation tok/s\n(counter)")
    axes[2].set_xlabel("run time (s)")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].set_title("Server metrics timeline (/metrics polls)")
    _margins(fig, left=1.2, right=0.25, top=0.45, bottom=0.6, hspace=0.15)
    return png_bytes(fig)


def sessions_png(streams: list[StreamRow]) -> bytes | None:
    """Session turns: TTFT by turn (one line per session) and decode rate against context
    length (prompt tokens from usage). None when the run had no sessions."""
    turns = [s for s in streams if s.turn is not None and s.status == "ok"]
    if not turns:
        return None
    fig = Figure(figsize=(11, 4))
    ax_ttft, ax_decode = fig.subplots(1, 2)
    by_session: dict[str | None, list[StreamRow]] = {}
    for s in turns:
        by_session.setdefault(s.session, []).append(s)
    for rows in by_session.values():
        rows.sort(key=lambda s: s.turn or 0)
        ax_ttft.plot([s.turn for s in rows], [s.ttft_s for s in rows], marker="o", lw=1)
    ax_ttft.set_xlabel("turn")
    ax_ttft.set_ylabel("TTFT (s)")
    ax_ttft.set_title("TTFT per turn (one line per session)")
    points = [(s.prompt_tokens, s.decode_tok_s) for s in turns if s.prompt_tokens]
    ax_decode.scatter([p[0] for p in points], [p[1] for p in points], s=14)
    ax_decode.set_xlabel("context: prompt tokens (usage)")
    ax_decode.set_ylabel("decode tok/s (per stream)")
    ax_decode.set_title("decode rate against context length")
    _margins(fig, left=0.8, right=0.25, top=0.45, bottom=0.6, wspace=0.3)
    return png_bytes(fig)
