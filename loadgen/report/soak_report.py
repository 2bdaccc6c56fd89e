"""The soak report: windows table (rate beside its controls), context bins per window, the
drift verdict with its reason, how the soak ended, the client's self-watch, and a rate-over-time
plot with the windows shaded. Everything is recomputed from the run directory, so a partial
directory (Ctrl-C, SIGKILL, a dead server) gives the report of what was recorded."""

from __future__ import annotations

import html
from pathlib import Path

from matplotlib.figure import Figure

from loadgen.analysis.drift import DriftVerdict
from loadgen.analysis.soak import CONTEXT_BINS, analyze_soak_dir
from loadgen.analysis.soak_types import (
    SERVER_STOPS,
    ClocksControl,
    SoakPrecise,
    SoakSummary,
    WindowClient,
    WindowGpu,
    read_soak,
)
from loadgen.analysis.stats import dumps_canonical
from loadgen.clock import ClockName
from loadgen.report.html import _img, _page
from loadgen.report.plots import png_bytes
from loadgen.report.tables import DASH, Table, num, rate, secs, to_html, to_plain
from loadgen.report.text import lost_lines, standing_text

SHADES = ("#e8eef7", "#f7efe4")
# A soak that stopped more than this share past its duration says by how much.
OVERRUN_SAID = 0.01


def windows_table(s: SoakSummary) -> Table:
    rows = []
    for w in s.windows:
        srv = w.server
        rows.append((
            w.label, str(w.n), secs(w.duration_s),
            rate(w.decode_tok_s_median), rate(w.decode_tok_s_p10),
            secs(w.ttft_s_median), rate(w.prefill_tok_s_median),
            num(w.context_mean, 0), f"{num(w.prompt_tokens_mean, 0)}/"
            f"{num(w.completion_tokens_mean, 0)}",
            _perc(srv.prefix_hit_rate), _perc(srv.spec_acceptance),
            f"{num(srv.kv_peak_perc)}/{num(w.server.kv_mean_perc)}",
            num(srv.preemptions, 0), num(srv.generation_tokens, 0),
            num(w.server.prompt_tokens, 0),
            _client_cell(w.client), _gpu_cell(w.gpu),
        ))  # fmt: skip
    return Table(
        f"Soak windows ({'cut where precise' if s.precise else s.window})",
        ("window", "n", "length s", "decode tok/s p50", "p10", "TTFT p50 s", "prefill tok/s",
         "mean ctx", "prompt/out", "prefix hit", "spec accept", "kv% peak/mean", "preempt",
         "gen tok (server)", "prompt tok (server)", "client lag max ms / cpu / RSS MiB",
         "GPU SM MHz / W / throttle"),
        tuple(rows),
        notes=(
            "decode tok/s: per request, token-true (completion tokens after the first chunk over "
            "first->last chunk); p50 and p10 of the window's requests",
            "prefix hit, spec accept, kv%, preempt, gen/prompt tok: deltas and polls of the "
            "server's own /metrics over the window (never tokens over wall time)",
            "mean ctx: prompt + completion/2 tokens (the KV length halfway through decode)",
        ),
    )  # fmt: skip


def _perc(x: float | None) -> str:
    return DASH if x is None else f"{x * 100:.1f}%"


def _gpu_cell(g: WindowGpu) -> str:
    if not g.available:
        return DASH
    return (f"{num(g.sm_clock_mhz_mean, 0)} / {num(g.power_w_mean, 0)} / "
            f"{','.join(g.throttle_reasons) or 'none'}")  # fmt: skip


def _client_cell(c: WindowClient) -> str:
    if not c.available:
        return DASH
    flag = " BEHIND" if c.behind else ""
    return f"{c.lag_max_ms:.0f} / {c.cpu_share * 100:.0f}% / {c.rss_mib_mean:.0f}{flag}"


def precision_table(s: SoakSummary) -> Table | None:
    """Per window of a soak under `--until-precise`: what closed it, the measured streams it
    took, and where each target stood then (None: a soak without it)."""
    if s.precise is None:
        return None
    rows = []
    for w in s.windows:
        p = w.precision
        if p is None:
            continue
        closed = "precise" if p.reached else f"not reached ({p.cut_by})"
        rows.append((w.label, closed, str(p.measured), *map(standing_text, p.targets)))
    return Table(
        "Window precision (--until-precise)",
        ("window", "closed by", "measured", *s.precise.targets),
        tuple(rows),
        notes=(
            "each target: its percentile over the window's measured ok streams, the 95% "
            "distribution-free (order-statistic) interval, the margin reached and the n it took",
            f"a window closes once every target is within its goal, {_limit(s.precise)}; "
            "not reached: its length or the soak's end came first",
        ),
    )


def _limit(p: SoakPrecise) -> str:
    return "with no length of its own" if p.limit_s is None else f"at most {p.limit_s:g} s long"


def precise_lines(s: SoakSummary) -> list[str]:
    """How many windows came within the `--until-precise` goals, and a `!!` line naming each
    window whose length or the soak's end came first (nothing for a soak without it)."""
    if s.precise is None:
        return []
    done = [w for w in s.windows if w.precision is not None and w.precision.reached]
    short = [f"{w.label} ({w.precision.cut_by})" for w in s.windows
             if w.precision is not None and not w.precision.reached]  # fmt: skip
    lines = [f"until precise: {', '.join(s.precise.targets)}; each window closed once precise, "
             f"{_limit(s.precise)}: {len(done)} of {len(s.windows)} windows precise"]  # fmt: skip
    if short:
        lines.append(f"!! NOT PRECISE: not reached in {', '.join(short)}")
    return lines


def bins_table(s: SoakSummary) -> Table:
    labels = [b[0] for b in CONTEXT_BINS]
    rows = []
    for label in labels:
        cells = []
        for w in s.windows:
            hit = w.context_bin(label)
            cells.append(DASH if hit is None else f"{hit.n} @ {rate(hit.decode_tok_s_mean)}")
        if any(c != DASH for c in cells):
            rows.append((label, *cells))
    return Table(
        "Decode tok/s by context bin (n @ mean rate)",
        ("context", *(w.label for w in s.windows)),
        tuple(rows),
        notes=("bins (tokens of mean decode context): "
               + ", ".join(b[0] for b in CONTEXT_BINS) + "; a rate change within a bin is not "
               "a change of mix",),
    )  # fmt: skip


def drift_reason(v: DriftVerdict, excluded: int = 0, windows: int = 0) -> str:
    """Why the drift verdict is what it is, with its numbers; `excluded` of `windows` were left
    out of it because the client fell behind."""
    if not excluded:
        return _case_text(v)
    return f"{excluded} of {windows} windows left out (the client fell behind): {_case_text(v)}"


def _case_text(v: DriftVerdict) -> str:
    if v.case == "few_requests":
        return f"{v.n} completed requests; at least {v.needed_n} are needed for a trend"
    adjusted, raw = v.adjusted, v.raw
    if adjusted is None or raw is None:  # confounded
        return "time and context cannot be told apart in these requests"
    inside = f"inside +-{v.threshold:.1%}"
    at_fixed = (f"at fixed context {_pct(adjusted.effect)} over the soak (CI {_pct(adjusted.lo)}"
                f" .. {_pct(adjusted.hi)}; {_pct(adjusted.per_hour)}/h)")  # fmt: skip
    raw_text = f"raw rate {_pct(raw.effect)}" + (
        "" if v.context_change is None else f", mean context {_pct(v.context_change)}"
    )
    if v.case == "acceptance":
        predicts = _pct(v.acceptance_change or 0.0)
        return f"{at_fixed}, but speculative acceptance alone predicts {predicts}"
    if v.case == "beyond":
        word = "slower" if adjusted.effect < 0 else "FASTER"
        return f"decode got {word}: {at_fixed}; {raw_text}"
    if v.case == "traffic":
        return f"{raw_text}: the traffic changed, not the engine; {at_fixed}, {inside}"
    if v.case == "inside":
        return f"{at_fixed}, {inside}; {raw_text}"
    more = (
        "the effect sits on the threshold; no number of requests would settle it"
        if v.needed_n is None
        else f"about {v.needed_n} requests in all would resolve it"
    )
    return f"{at_fixed} straddles +-{v.threshold:.1%}; {more}; {raw_text}"


def drift_method(v: DriftVerdict) -> str:
    b = v.bootstrap
    return (
        "OLS of log(decode rate) on time, log(context) and its square; moving-block bootstrap "
        f"({b.resamples} resamples, seed {b.seed}), {b.ci_level:.0%} CI; threshold "
        f"+-{v.threshold:.1%} over the soak"
    )


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


def soak_reason(s: SoakSummary) -> str:
    """The soak's drift verdict's reason, with the windows it left out."""
    return drift_reason(s.verdict, len(s.excluded_windows), len(s.windows))


def head_lines(s: SoakSummary) -> list[str]:
    v, target, end = s.verdict, s.target, s.end
    lines = [
        f"soak {s.scenario} against {target.kind or '?'} {target.url or ''}"
        f" ({s.requests} requests decoded, {s.failed_streams} failed)",
        f"VERDICT: {v.verdict}: {soak_reason(s)}",
        f"method: {drift_method(v)}",
        f"ended: {end.reason or 'unknown'}"
        + (f" at {end.at_s:.1f} s of the run clock" if end.at_s is not None else "")
        + (f" ({end.detail})" if end.detail else ""),
    ]
    lines += _overrun_lines(s)
    if s.first_to_last is not None:
        lines.append(f"median decode first -> last window: {s.first_to_last * 100:+.1f}% "
                     "(raw, traffic mix not held fixed)")  # fmt: skip
    if end.reason in SERVER_STOPS:
        lines.append(f"!! the server stopped serving mid-soak: {end.detail}")
    lines += [] if s.records is None else lost_lines(s.records)
    lines.append(_client_line(s))
    lines += precise_lines(s)
    lines += _clocks_lines(s.clocks)
    if s.excluded_windows:
        lines.append("!! left out of the verdict (client fell behind): "
                     + ", ".join(s.excluded_windows))  # fmt: skip
    if s.speed not in (None, 1, 1.0) and target.kind == "sim":
        lines.append(f"sim at speed {s.speed:g}: times and rates are on the sim's "
                     "engine clock (wall x speed)")  # fmt: skip
    return lines


def _overrun_lines(s: SoakSummary) -> list[str]:
    """How far past its duration a soak sent: a conversation under way finishes its turns
    (soak_agent's hour ran to 3,803 s, and its end line read 1800 s)."""
    end, speed = s.end, s.speed if s.target.kind == "sim" and s.speed else 1.0
    if end.reason != "duration reached" or end.at_s is None or not s.duration_s:
        return []
    server_s = end.at_s * speed
    if server_s <= s.duration_s * (1 + OVERRUN_SAID):
        return []
    return [f"note: the soak stopped at {server_s:.0f} s on the server's clock, "
            f"{server_s / s.duration_s - 1:.0%} past its {s.duration_s:g} s duration: the "
            "conversations under way at the deadline finished their turns"]  # fmt: skip


def _clocks_lines(c: ClocksControl) -> list[str]:
    """The GPU clocks as a control of the drift verdict (nothing where no GPU was sampled)."""
    if not c.measured:
        return []
    moved = c.sm_clock_change
    clock = (DASH if c.sm_clock_first_mhz is None or c.sm_clock_last_mhz is None else
             f"SM {c.sm_clock_first_mhz:.0f} -> {c.sm_clock_last_mhz:.0f} MHz"
             + ("" if moved is None else f" ({moved * 100:+.1f}%)"))  # fmt: skip
    if c.ruled_out:
        return [f"GPU clocks ruled out: {clock}, no power or thermal throttling in any window"]
    why = (f"throttled ({', '.join(c.reasons)}) in {', '.join(c.throttled_windows)}"
           if c.throttled_windows else "clocks moved")  # fmt: skip
    return [f"!! GPU clocks NOT ruled out: {why}; {clock}: a drift may be the clocks"]


def _client_line(s: SoakSummary) -> str:
    if s.clock == ClockName.VIRTUAL:
        return "client: on the virtual clock there is no client in the loop; nothing to watch"
    mem = s.client_memory
    if not s.client_watched or not mem.measured:
        return "client: self-watch not recorded (too short, or an older run directory)"
    word = "flat" if mem.flat else "NOT flat"
    return (f"client memory {word}: RSS {mem.first_mib:.0f} -> {mem.last_mib:.0f} MiB "
            f"({mem.change * 100:+.1f}%, first to last window; /proc/self/statm)")  # fmt: skip


def rate_png(s: SoakSummary) -> bytes | None:
    """Decode rate of every request over time, windows shaded, mean context on a second axis."""
    pts = s.points
    if not pts:
        return None
    fig = Figure(figsize=(10, 4))
    ax = fig.add_subplot(1, 1, 1)
    for i, w in enumerate(s.windows):
        ax.axvspan(w.from_s / 60, w.to_s / 60, color=SHADES[i % 2], zorder=0)
        ax.text((w.from_s + w.to_s) / 120, 1.0, w.label, ha="center", va="bottom",
                transform=ax.get_xaxis_transform(), fontsize=8)  # fmt: skip
    ax.scatter([p.t_s / 60 for p in pts], [p.rate for p in pts], s=6, color="#1d5fa8",
               label="decode tok/s (per request)", zorder=2)  # fmt: skip
    ax.set_xlabel("minutes since the soak started (server's clock)")
    ax.set_ylabel("decode tok/s")
    ctx = ax.twinx()
    ctx.plot([p.t_s / 60 for p in pts], [p.context for p in pts], lw=0.6,
             color="#e9a23b", label="context (tokens)", zorder=1)  # fmt: skip
    ctx.set_ylabel("mean decode context, tokens")
    fig.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    return png_bytes(fig)


def _tables(s: SoakSummary) -> list[Table]:
    return [t for t in (windows_table(s), precision_table(s), bins_table(s)) if t is not None]


def render_plain(s: SoakSummary) -> str:
    return "\n\n".join(["\n".join(head_lines(s)), *map(to_plain, _tables(s))]) + "\n"


def write_soak_report(path: Path) -> str:
    """(Re)writes soak.json, report.txt, rate.png and report.html; returns the text report."""
    raw = analyze_soak_dir(path)
    (path / "soak.json").write_bytes(dumps_canonical(raw))
    s = read_soak(raw)
    text = render_plain(s)
    (path / "report.txt").write_text(text, encoding="utf-8")
    png = rate_png(s)
    if png is not None:
        (path / "rate.png").write_bytes(png)
    lines = "".join(f"<p class='{'warn' if x.startswith('!!') else 'meta'}'>{html.escape(x)}</p>"
                    for x in head_lines(s)[1:])  # fmt: skip
    body = (lines + "<h2>Decode rate over the soak</h2>"
            + _img(png, "decode rate over time", "no request decoded")
            + "".join(map(to_html, _tables(s))))  # fmt: skip
    (path / "report.html").write_text(_page(head_lines(s)[0], body), encoding="utf-8")
    return text
