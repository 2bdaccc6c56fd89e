"""A soak run cut into windows, each with the rate beside its controls, and the drift verdict.

Windows:
- `thirds` (default): the completed requests in order of sending, split into three runs of
  consecutive requests (np.array_split: the first windows take the remainder). A window spans
  from its first request's send to the next window's first send (the last one to the last
  request's end), so the windows tile the soak and server counters are never counted twice.
- fixed time windows (`5m`, `300s`, `1h`): [k*w, (k+1)*w) on the run clock; a request belongs
  to the window it was sent in.
- `--until-precise` (precise_windows): a window closes as soon as every target percentile's
  order-statistic interval over its measured streams is within its margin (precision.py, the
  tracker that stops a run) and the next opens at once, so the windows still tile the soak under
  its unbroken load; a window lasts at most the `--window` length (thirds: a third of the
  duration), and the soak's end cuts the last. Streams are taken in the order they were
  written, each in the window it ended in, as a live stop would have seen them.
Per window, from the client's records: token-true decode rate (median, p10 of requests), TTFT,
prefill rate (prefilled prompt tokens / TTFT), mean decode context (prompt + completion / 2:
the KV length halfway through its decode), the size mix (mean prompt and completion tokens).
From the server's own counters (metrics.jsonl deltas over the window, never tokens over wall
time): generation and prompt tokens, prefix hits/queries, spec-decode accepted/drafted,
preemptions, kv usage (peak and mean of the polls, with the window's length), TTFT and
inter-token latency means from histogram sum/count deltas where exported.
From the client's self-watch (client.jsonl): event-loop lag, CPU share and RSS of loadgen.
From GPU telemetry (telemetry.jsonl, where sampled): SM clock and power means of the window's
samples over every GPU, and the clock-lowering reasons seen (power cap, thermal and hardware
slowdowns): the control that says whether a drift was the clocks rather than the server.

Context bins (rate by context per window, the seed's table): CONTEXT_BINS, in tokens.

`analyze_soak_dir` reads a soak's run directory (what soak.json holds, with how the soak ended
from run.json), so a partial directory gives the analysis of what was recorded.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.analysis import rates
from loadgen.analysis.aggregate import server_window
from loadgen.analysis.baselines import prefill_tokens
from loadgen.analysis.drift import DriftPoint, DriftVerdict, change, drift_verdict
from loadgen.analysis.energy import throttle_names
from loadgen.analysis.inputs import load_run, unplanned_records_json
from loadgen.analysis.precision import PrecisionTarget, PrecisionTracker, parse_precise
from loadgen.analysis.soak_types import SoakPrecise, WindowPrecision
from loadgen.analysis.timeline import Timeline
from loadgen.codec import to_json
from loadgen.records import StreamRecord, read_jsonl
from loadgen.run_manifest import RunManifest, TargetInfo
from loadgen.scenario.soak_block import parse_window

NS = rates.NS
# The seed's bins (5-30K / 30-55K / 55-70K / 70-90K / 90K+) and one below them for the short
# requests of steady soaks: (label, low inclusive, high exclusive).
CONTEXT_BINS: tuple[tuple[str, float, float], ...] = (
    ("<5K", 0, 5_000),
    ("5-30K", 5_000, 30_000),
    ("30-55K", 30_000, 55_000),
    ("55-70K", 55_000, 70_000),
    ("70-90K", 70_000, 90_000),
    ("90K+", 90_000, math.inf),
)
# The client fell behind in a window when its loop woke this late in more than
# BEHIND_SHARE of the window's self-watch samples, or it used this share of one core.
BEHIND_LAG_MS = 50.0
BEHIND_SHARE = 0.1
BEHIND_CPU = 0.9
# Client RSS is "flat" when the last window's mean is within this fraction of the first's.
RSS_FLAT = 0.10

# Throttle reasons that lower the clocks under load: a power cap, thermal or hardware slowdown
# (not idle, sync boost, or a clock someone set by hand).
SLOWDOWN_BITS = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
# SM clocks are "flat" when the last window's mean is within this fraction of the first's.
CLOCK_FLAT = 0.02

HIST_MEANS = (
    ("ttft_mean_s", "time_to_first_token_seconds_sum", "time_to_first_token_seconds_count"),
    ("itl_mean_s", "inter_token_latency_seconds_sum", "inter_token_latency_seconds_count"),
)


@dataclass(frozen=True, slots=True)
class SoakPoint:
    """One completed request of the soak."""

    id: str
    group: str
    order: int
    t_sent_ns: int
    t_mid_ns: int  # decode midpoint
    t_done_ns: int
    rate: float
    ttft_s: float | None
    prefill_tok_s: float | None
    context: float
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True, slots=True)
class Window:
    index: int
    label: str
    from_ns: int
    to_ns: int
    points: tuple[SoakPoint, ...]


def soak_points(records: Sequence[StreamRecord]) -> list[SoakPoint]:
    """Measured requests that decoded (a rate exists), in order of sending."""
    done = [
        r
        for r in records
        if r.phase == "measure" and r.status == "ok" and rates.decode_tok_s(r) is not None
    ]
    done.sort(key=lambda r: (r.t_sent_ns or r.t_intended_ns, r.id))
    return [_point(i, r) for i, r in enumerate(done)]


def _point(order: int, r: StreamRecord) -> SoakPoint:
    prompt = r.prompt_tokens if r.prompt_tokens is not None else r.requested_prompt_tokens or 0
    ttft = rates.ttft_s(r)
    filled = prefill_tokens(r)
    assert r.t_first_ns is not None and r.t_last_ns is not None  # a rate exists
    return SoakPoint(
        id=r.id,
        group=r.group,
        order=order,
        t_sent_ns=r.t_sent_ns or r.t_intended_ns,
        t_mid_ns=(r.t_first_ns + r.t_last_ns) // 2,
        t_done_ns=r.t_done_ns or r.t_last_ns,
        rate=float(rates.decode_tok_s(r) or 0.0),
        ttft_s=ttft,
        prefill_tok_s=None if not ttft or filled is None else filled / ttft,
        context=prompt + r.completion_tokens / 2,
        prompt_tokens=prompt,
        completion_tokens=r.completion_tokens,
    )


def thirds(points: Sequence[SoakPoint]) -> list[Window]:
    """Three windows of consecutive requests by order of sending (see the module docstring)."""
    if not points:
        return []
    end = max(p.t_done_ns for p in points)
    parts = [tuple(points[i] for i in idx) for idx in np.array_split(np.arange(len(points)), 3)]
    parts = [p for p in parts if p]
    starts = [p[0].t_sent_ns for p in parts] + [end]
    labels = ("first third", "middle third", "last third") if len(parts) == 3 else None
    return [
        Window(i, labels[i] if labels else f"part {i + 1}", starts[i], starts[i + 1], part)
        for i, part in enumerate(parts)
    ]


def time_windows(points: Sequence[SoakPoint], width_s: float, speed: float = 1.0) -> list[Window]:
    """Fixed windows of `width_s` (run clock) from the run's start, up to the last request's
    end, labelled in the server's minutes (a sim at `speed` runs that many per wall minute)."""
    if not points:
        return []
    width = round(width_s * NS)
    end = max(p.t_done_ns for p in points)
    count = max(1, math.ceil(end / width))
    out = []
    for k in range(count):
        lo, hi = k * width, min((k + 1) * width, end)
        inside = tuple(p for p in points if lo <= p.t_sent_ns < hi)
        label = f"{lo * speed / NS / 60:g}-{hi * speed / NS / 60:.3g} min"
        out.append(Window(k, label, lo, hi, inside))
    return out


# What closed a window of a soak under --until-precise before its targets were reached.
WINDOW_LENGTH = "window length"
SOAK_END = "soak end"


def precise_windows(
    records: Sequence[StreamRecord],
    points: Sequence[SoakPoint],
    targets: tuple[PrecisionTarget, ...],
    limit_ns: int | None,
) -> list[tuple[Window, WindowPrecision]]:
    """The soak cut where each window became precise (module docstring), each window with how
    precisely it pinned the targets; `limit_ns`: the longest a window lasts (run clock)."""
    by_id = {p.id: p for p in points}
    out: list[tuple[Window, WindowPrecision]] = []
    opened, members, tracker = 0, list[str](), PrecisionTracker(targets)

    def close(at_ns: int, cut_by: str | None) -> None:
        nonlocal opened, members, tracker
        inside = sorted((by_id[i] for i in members if i in by_id), key=lambda p: p.order)
        out.append((Window(len(out), f"w{len(out) + 1}", opened, at_ns, tuple(inside)),
                    WindowPrecision(tracker.reached, len(members), None,
                                    tuple(tracker.standing), cut_by)))  # fmt: skip
        opened, members, tracker = at_ns, [], PrecisionTracker(targets)

    seen = 0
    for rec in records:
        if rec.phase != "measure":
            continue
        seen = max(opened, rec.t_done_ns if rec.t_done_ns is not None else rec.t_intended_ns)
        while limit_ns is not None and seen >= opened + limit_ns:
            close(opened + limit_ns, WINDOW_LENGTH)
        members.append(rec.id)
        tracker.see(rec)
        if tracker.reached:
            close(seen, None)
    if members:
        close(seen, SOAK_END)
    return out


def window_stats(w: Window, speed: float = 1.0) -> dict[str, Any]:
    """The client's view of one window: rates, TTFT, prefill, context and size mix. `speed`
    puts times and rates on the server's clock (a sim running `speed` x faster than wall)."""
    rs = [p.rate / speed for p in w.points]
    groups: dict[str, int] = {}
    for p in w.points:
        groups[p.group] = groups.get(p.group, 0) + 1
    ttfts = [p.ttft_s * speed for p in w.points if p.ttft_s is not None]
    prefills = [p.prefill_tok_s / speed for p in w.points if p.prefill_tok_s is not None]
    return {
        "index": w.index,
        "label": w.label,
        "from_s": w.from_ns / NS * speed,
        "to_s": w.to_ns / NS * speed,
        "duration_s": (w.to_ns - w.from_ns) / NS * speed,
        "n": len(w.points),
        "decode_tok_s_median": _pct(rs, 50),
        "decode_tok_s_p10": _pct(rs, 10),
        "decode_tok_s_mean": float(np.mean(rs)) if rs else None,
        "ttft_s_median": _pct(ttfts, 50),
        "prefill_tok_s_median": _pct(prefills, 50),
        "context_mean": float(np.mean([p.context for p in w.points])) if rs else None,
        "prompt_tokens_mean": float(np.mean([p.prompt_tokens for p in w.points])) if rs else None,
        "completion_tokens_mean": (
            float(np.mean([p.completion_tokens for p in w.points])) if rs else None
        ),
        "groups": groups,
    }


def _pct(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if len(values) else None


def server_stats(timeline: Timeline, w: Window) -> dict[str, Any]:
    """The server's own counters over the window (aggregate.server_window), plus prompt tokens,
    the mean kv usage of the polls and histogram means where the server exports them."""
    out = server_window(timeline, w.from_ns, w.to_ns)
    if not out.get("available"):
        return out
    if out["polled"] is not None:
        # Windows are compared with each other: one whose counters cover a part of it would
        # read as a server that did less (a cut metrics file read 0 tokens, not "-").
        return {"available": False, "note": "the server's polls cover only part of the window"}
    d = timeline.outer_delta("prompt_tokens_total", w.from_ns, w.to_ns)
    out["prompt_tokens"] = None if d is None else d[0]
    ts, vs = timeline.series("kv_cache_usage_perc")
    kv = [v for t, v in zip(ts, vs, strict=True) if w.from_ns <= t <= w.to_ns]
    out["kv_mean_perc"] = float(np.mean(kv)) * 100 if kv else None
    for key, total, count in HIST_MEANS:
        a, b = (
            timeline.outer_delta(total, w.from_ns, w.to_ns),
            timeline.outer_delta(count, w.from_ns, w.to_ns),
        )
        out[key] = None if a is None or b is None or not b[0] else a[0] / b[0]
    return out


def client_stats(samples: Sequence[dict[str, Any]], w: Window) -> dict[str, Any]:
    """The client's self-watch over the window; `behind` when it fell behind (see the module
    constants). No samples (the virtual clock, or an older run): available False."""
    inside = [s for s in samples if w.from_ns <= s["t_ns"] <= w.to_ns]
    if len(inside) < 2:
        return {"available": False, "behind": False}
    lags = [s["lag_max_ms"] for s in inside]
    cpu = (inside[-1]["cpu_s"] - inside[0]["cpu_s"]) / (
        (inside[-1]["t_ns"] - inside[0]["t_ns"]) / NS
    )
    late_share = sum(1 for x in lags if x > BEHIND_LAG_MS) / len(lags)
    rss = [s["rss_bytes"] / 2**20 for s in inside]
    return {
        "available": True,
        "samples": len(inside),
        "lag_max_ms": max(lags),
        "lag_median_ms": float(np.median(lags)),
        "late_share": late_share,
        "cpu_share": cpu,
        "rss_mib_mean": float(np.mean(rss)),
        "rss_mib_max": max(rss),
        "behind": late_share > BEHIND_SHARE or cpu > BEHIND_CPU,
    }


def gpu_stats(inside: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The GPUs over a window, from its telemetry lines: mean SM clock and power of its samples
    (all GPUs), and the clock-lowering throttle reasons any sample carried."""
    gpus = [g for t in inside for g in t["gpus"]]
    if not gpus:
        return {"available": False}
    sm = [float(g["sm_clock_mhz"]) for g in gpus if "sm_clock_mhz" in g]
    power = [float(g["power_w"]) for g in gpus if "power_w" in g]
    mask = 0
    for g in gpus:
        mask |= int(g.get("throttle", 0)) & SLOWDOWN_BITS
    return {
        "available": True,
        "samples": len(inside),
        "sm_clock_mhz_mean": float(np.mean(sm)) if sm else None,
        "power_w_mean": float(np.mean(power)) if power else None,
        "throttle_reasons": throttle_names(mask),
    }


def clocks_control(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Whether the GPU clocks can be ruled out as a cause of drift: no window throttled for
    power or heat, and the SM clock's mean flat from the first window to the last."""
    seen = [r for r in rows if r["gpu"]["available"]]
    if not seen:
        return {"measured": False}
    throttled = [r["label"] for r in seen if r["gpu"]["throttle_reasons"]]
    reasons = sorted({x for r in seen for x in r["gpu"]["throttle_reasons"]})
    clocks = [r["gpu"]["sm_clock_mhz_mean"] for r in seen if r["gpu"]["sm_clock_mhz_mean"]]
    moved = change(clocks[0], clocks[-1]) if len(clocks) > 1 else None
    flat = moved is None or abs(moved) <= CLOCK_FLAT
    return {
        "measured": True,
        "throttled_windows": throttled,
        "reasons": reasons,
        "sm_clock_first_mhz": clocks[0] if clocks else None,
        "sm_clock_last_mhz": clocks[-1] if clocks else None,
        "sm_clock_change": moved,
        "ruled_out": not throttled and flat,
    }


def context_bins(w: Window, speed: float = 1.0) -> list[dict[str, Any]]:
    """Rate by context bin in one window (bins with no request are left out)."""
    rows = []
    for label, lo, hi in CONTEXT_BINS:
        rs = [p.rate / speed for p in w.points if lo <= p.context < hi]
        if rs:
            rows.append({"bin": label, "n": len(rs), "decode_tok_s_mean": float(np.mean(rs))})
    return rows


def acceptance_change(first: dict[str, Any], last: dict[str, Any]) -> float | None:
    """Decode-rate change that speculative acceptance alone predicts between two windows:
    emitted tokens per engine step, last over first (None without spec-decode counters)."""
    a, b = first.get("spec_emitted_per_step"), last.get("spec_emitted_per_step")
    return None if not a or not b else change(a, b)


def memory_flat(client: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Whether loadgen's RSS stayed flat, first window with samples to last."""
    seen = [c for c in client if c.get("available")]
    if len(seen) < 2:
        return {"measured": False}
    first, last = seen[0]["rss_mib_mean"], seen[-1]["rss_mib_mean"]
    return {
        "measured": True,
        "first_mib": first,
        "last_mib": last,
        "change": change(first, last),
        "flat": abs(change(first, last)) <= RSS_FLAT,
    }


def analyze_soak(
    records: Sequence[StreamRecord],
    timeline: Timeline,
    client_samples: Sequence[dict[str, Any]],
    *,
    window: str = "thirds",
    speed: float = 1.0,
    telemetry: Sequence[dict[str, Any]] = (),
    precise: tuple[PrecisionTarget, ...] = (),
    duration_s: float | None = None,
) -> dict[str, Any]:
    """The soak's windows (`thirds` or a length like `5m` of the server's clock, or cut where
    each became `precise`: client, server and self-watch stats side by side), the context-bin
    table per window, the client memory check and the drift verdict. Records and metrics are
    on the run's wall clock; a sim at `speed` runs that many engine seconds per wall second,
    and every time and rate out of here is on the server's clock; `duration_s`: the soak's,
    whose third bounds a precise window under `thirds`."""
    window_s = parse_window(window)
    points = soak_points(records)
    windows = thirds(points) if window_s is None else time_windows(points, window_s / speed, speed)
    limit_s = window_s if window_s is not None else duration_s and duration_s / 3
    limit_ns = round(limit_s / speed * NS) if limit_s else None
    cut = precise_windows(records, points, precise, limit_ns) if precise else []
    windows = [w for w, _ in cut] if precise else windows
    tele = sorted((t for t in telemetry if t.get("gpus")), key=lambda t: t["t_ns"])
    tele_ns = [t["t_ns"] for t in tele]
    rows = []
    for w in windows:
        inside = tele[bisect_left(tele_ns, w.from_ns) : bisect_left(tele_ns, w.to_ns)]
        rows.append(
            window_stats(w, speed)
            | {
                "server": server_stats(timeline, w),
                "client": client_stats(client_samples, w),
                "gpu": gpu_stats(inside),
                "context_bins": context_bins(w, speed),
            }
        )
    if precise:
        for row, (_, standing) in zip(rows, cut, strict=True):
            row["precision"] = to_json(_on_server_clock(standing, precise, speed))
    kept = [p for w, r in zip(windows, rows, strict=True) if not r["client"]["behind"]
            for p in w.points]  # fmt: skip
    verdict = _verdict(kept, rows, speed)
    excluded = [r["label"] for r in rows if r["client"]["behind"]]
    rates_first_last = [r["decode_tok_s_median"] for r in rows if r["n"]]
    asked = SoakPrecise(tuple(t.shown for t in precise), limit_s or None) if precise else None
    return {
        "window": window,
        **({} if asked is None else {"precise": to_json(asked)}),
        "requests": len(points),
        "windows": rows,
        "first_to_last": (
            change(rates_first_last[0], rates_first_last[-1]) if len(rates_first_last) > 1 else None
        ),
        "excluded_windows": excluded,
        "client_memory": memory_flat([r["client"] for r in rows]),
        "client_watched": any(r["client"]["available"] for r in rows),
        "clocks": clocks_control(rows),
        "verdict": to_json(verdict),
        "points": [
            {
                "t_s": p.t_mid_ns / NS * speed,
                "rate": p.rate / speed,
                "context": p.context,
                "order": p.order,
            }
            for p in points
        ],
    }


def _on_server_clock(
    standing: WindowPrecision, targets: tuple[PrecisionTarget, ...], speed: float
) -> WindowPrecision:
    """A window's precision in the soak's units: the windows table's TTFT is on the server's
    clock (x20 on a sim at speed 20), and its precision read 0.02679 beside a p50 of 0.536."""
    by_name = {t.name: t for t in targets}
    scaled = []
    for p in standing.targets:
        t = by_name[p.target]
        scaled.append(replace(p, estimate=t.on_server_clock(p.estimate, speed),
                              low=t.on_server_clock(p.low, speed),
                              high=t.on_server_clock(p.high, speed)))  # fmt: skip
    return replace(standing, targets=tuple(scaled))


def _verdict(kept: list[SoakPoint], rows: list[dict[str, Any]], speed: float) -> DriftVerdict:
    start = min((p.t_sent_ns for p in kept), default=0)
    drift_points = [
        DriftPoint((p.t_mid_ns - start) / NS * speed / 3600, p.rate / speed, p.context)
        for p in kept
    ]
    filled = [r for r in rows if r["n"] and not r["client"]["behind"]]
    acc = ctx = None
    if len(filled) > 1:
        acc = acceptance_change(filled[0]["server"], filled[-1]["server"])
        ctx = change(filled[0]["context_mean"], filled[-1]["context_mean"])
    return drift_verdict(drift_points, acceptance_change=acc, context_change=ctx)


def is_soak(manifest: RunManifest) -> bool:
    """A run whose scenario is a soak (a `soak:` block)."""
    return bool((manifest.scenario or {}).get("soak"))


def analyze_soak_dir(path: Path) -> dict[str, Any]:
    """soak analysis of a run directory, with how it ended (from run.json)."""
    inputs = load_run(path)
    m = inputs.manifest
    block = (m.scenario or {}).get("soak") or {}
    client = list(read_jsonl(path / "client.jsonl"))
    on_sim = isinstance(m.target, TargetInfo) and m.target.kind == "sim"
    speed = float(m.speed or 1.0) if on_sim else 1.0
    precise = tuple(parse_precise(spec) for spec in m.soak_precise or ())
    out = analyze_soak(inputs.streams, Timeline(inputs.metrics), client,
                       window=str(block.get("window", "thirds")), speed=speed,
                       telemetry=inputs.telemetry, precise=precise,
                       duration_s=block.get("duration_s"))  # fmt: skip
    failed = [r for r in inputs.streams if r.phase == "measure" and r.status != "ok"]
    return out | {
        "scenario": m.scenario_name,
        "target": None if m.target is None else to_json(m.target),
        "speed": m.speed,
        "clock": m.clock,
        "duration_s": block.get("duration_s"),
        "end": _end(m),
        "failed_streams": len(failed),
        "failed_classes": sorted({r.error.cls for r in failed if r.error}),
        "records": unplanned_records_json(inputs),
    }


def _end(m: RunManifest) -> dict[str, Any]:
    end = {} if m.soak_end is None else to_json(m.soak_end)
    if (m.interrupted is None or m.interrupted) and not end.get("reason"):
        end["reason"] = "interrupted"
        end["detail"] = "the run did not finish (Ctrl-C, kill or crash): this is the recorded part"
    return end
