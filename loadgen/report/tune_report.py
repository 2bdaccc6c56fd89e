"""`loadgen tune`'s report: the ranking with each point's objective, figures and what binds it,
the verified points' predicted against measured figures with the boot floor, the pick and the
server command line; tune.png is the points' Pareto figure (load_plot's, one point per flag
setting)."""

from __future__ import annotations

from loadgen.analysis.load_sweep import PARETO_MIN_GAIN
from loadgen.analysis.tune import FIGURES, TunePoint, TuneSummary, Verification
from loadgen.report.load_plot import LoadPoint, pareto_png
from loadgen.report.tables import DASH, Table, msecs, num, to_plain

TUNE_PNG = "tune.png"
# The binds column's note: at the scenario's own load, or at a capacity search's boundary.
BINDS = (
    "binds: `meets` when every stream met the SLO, else the verdict most streams that missed "
    "carry (why the point loses)",
    "binds: the verdict most streams that missed carry at the first load that failed the SLO "
    "(the capacity search's boundary); `meets`: the SLO held at --max; figures: the step at "
    "the capacity",
)


def _pct(x: float | None) -> str:
    return DASH if x is None else f"{x:+.1%}"


def ranking_table(t: TuneSummary) -> Table:
    rows = tuple(
        (str(i + 1), p.arm, num(p.objective, 3), num(p.row.output_tok_s), msecs(p.row.ttft_p90_ms),
         msecs(p.row.tpot_p90_ms), _pct(p.row.attainment)[1:], p.binding,
         "*" if p.on_front else "")
        for i, p in enumerate(t.ranking)
    )  # fmt: skip
    slo = ", ".join(f"{i.name}<={i.limit:g}{i.unit or ''}" for i in t.slo)
    return Table(
        f"tune: {t.objective} on the virtual clock ({t.method}, {len(t.ranking)} of "
        f"{t.grid_points} points; SLO {slo})",
        ("#", "point", t.objective, "out tok/s", "TTFT p90", "TPOT p90", "within SLO",
         "binds", "pareto"),
        rows,
        notes=(BINDS[t.objective == "capacity"],),
        left=frozenset({1, 7}),
    )  # fmt: skip


def verify_table(t: TuneSummary) -> Table | None:
    v = t.verification
    if v is None:
        return None
    rows = []
    for p in v.points:
        for f in FIGURES:
            boots = " / ".join(num(b.get(f), 3) for b in p.boots)
            rows.append((p.arm, f, num(p.predicted.get(f), 3), num(p.measured(f), 3), boots,
                         _pct(p.error(f))))  # fmt: skip
    return Table("predicted (virtual clock) against measured (the server, per boot)",
                 ("point", "figure", "predicted", "measured", "boots", "error"), tuple(rows),
                 left=frozenset({0, 1}))  # fmt: skip


def verdict_lines(t: TuneSummary) -> list[str]:
    pick = t.pick
    lines = [f"stopped by {t.stopped_by}"] if t.stopped_by else []
    if pick is None:
        return [*lines, "no point was evaluated"]
    lines.append(f"pick: {pick.arm} ({t.objective} {num(pick.objective, 3)}, {pick.binding})")
    if t.verification is not None:
        lines.append(verification_line(t.verification))
    else:
        lines += _tie_lines(t, pick)
    if t.server_command:
        lines.append(f"server command: {t.server_command}")
    return lines


def _tie_lines(t: TuneSummary, pick: TunePoint) -> list[str]:
    """The points the unverified pick leads by less than a gain that counts (1%): a real
    server's boots would not tell them apart (3.695 against 3.691 and 3.677 was a pick)."""
    if pick.objective is None:
        return []
    floor = pick.objective * (1 - PARETO_MIN_GAIN)
    tied = [p.arm for p in t.ranking[1:] if p.objective is not None and p.objective >= floor]
    if not tied:
        return []
    return [f"note: {len(tied)} other point(s) within {PARETO_MIN_GAIN:.0%} of the pick's "
            f"{t.objective} ({', '.join(tied)}): a tie on the virtual clock, which a server's "
            "boot-to-boot spread can reverse; --verify N runs the top N on the server"]  # fmt: skip


def verification_line(v: Verification) -> str:
    """What the server said of the predicted best. Behind the measured best by less than the
    boot floor is not the same answer as being it: the boots could not tell the two apart (on
    the H200 an SLO on the minnows' TTFT made one point's goodput 0.309 / 0.153 on two boots)."""
    floor = DASH if v.floor is None else f"{v.floor:.2%}"
    gap = DASH if v.gap is None else f"{v.gap:.2%}"
    if v.holds and v.gap:
        said = (
            "is behind the measured best by less than the boot floor: the boots cannot tell "
            "them apart"
        )
    else:
        said = {True: "is the measured best within the boot floor",
                False: "is NOT the measured best within the boot floor",
                None: "cannot be judged against a boot floor"}[v.holds]  # fmt: skip
    return (f"predicted best {v.predicted_best} {said} (measured best {v.measured_best}, "
            f"{gap} behind it; floor {floor})")  # fmt: skip


def tune_plain(t: TuneSummary) -> str:
    head = [f"tune {t.scenario} with sim profile {t.profile['name']} ({t.profile['path']})"]
    tables = [ranking_table(t), verify_table(t)]
    body = "\n\n".join(to_plain(x) for x in tables if x is not None)
    return "\n".join(head) + "\n\n" + body + "\n\n" + "\n".join(verdict_lines(t)) + "\n"


def tune_figure(t: TuneSummary) -> bytes | None:
    points = [LoadPoint(p.arm, p.row, p.on_front) for p in t.ranking]
    return pareto_png(points, "the searched flags")
