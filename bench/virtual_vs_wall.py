"""The same scenarios on the wall-clock sim (over HTTP) and on the virtual clock, side by side.

    .venv/bin/python bench/virtual_vs_wall.py [SCENARIO ...] [--smoke]
    .venv/bin/python bench/virtual_vs_wall.py whale_c4 politeness ladder whale_c4_cached

Runs each scenario both ways (default: whale_c4 and politeness; --smoke: smoke) or reads
existing run directories (--wall DIR --virtual DIR, in pairs), and prints, per arm and group:
the verdicts each clock gave, median TTFT (from the intended send) and median decode-only
rate, and the largest per-stream difference. The ratios are the virtual clock's median TTFT
and decode rate over the wall clock's, per arm and group, and for each scenario run here the
wall clock's run time over the virtual one's. The wall clock is only as good as the machine is
idle: run it on a quiet machine.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from harness import Ratio, parser, ratio, report

from loadgen.analysis.inputs import arm_dirs
from loadgen.analysis.summary import analyze_run

DEFAULT_SCENARIOS, SMOKE_SCENARIOS = ["whale_c4", "politeness"], ["smoke"]


def run(scenario: str, clock: str, out: Path) -> tuple[Path, float]:
    """Runs `loadgen run SCENARIO --clock CLOCK`; the run directory and its wall seconds."""
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "loadgen", "run", scenario, "--clock", clock, "--out", str(out),
         "--no-progress"],
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    (run_dir,) = out.iterdir()
    return run_dir, time.perf_counter() - t0


def per_arm(run_dir: Path) -> dict[str, dict[str, Any]]:
    """Each arm's summary (one entry named '-' outside sweeps)."""
    dirs = arm_dirs(run_dir)
    if not dirs:
        return {"-": analyze_run(run_dir).summary}
    return {d.name: analyze_run(d).summary for d in dirs}


def pct(a: float | None, b: float | None) -> str:
    if a is None or b is None or a == 0:
        return "-"
    return f"{(b - a) / a * 100:+.2f}%"


def rows(scenario: str, wall: Path, virtual: Path) -> tuple[list[tuple[str, ...]], list[Ratio]]:
    """The table's rows and the ratios (virtual / wall) of one scenario run both ways."""
    out, ratios = [], []
    w_arms, v_arms = per_arm(wall), per_arm(virtual)
    if list(w_arms) != list(v_arms):
        raise SystemExit(f"{scenario}: arms differ: wall {list(w_arms)}, virtual {list(v_arms)}")
    for arm in w_arms:
        w, v = w_arms[arm], v_arms[arm]
        ws = {s["id"]: s for s in w["streams"] if s["phase"] == "measure"}
        vs = {s["id"]: s for s in v["streams"] if s["phase"] == "measure"}
        if ws.keys() != vs.keys() or w["groups"].keys() != v["groups"].keys():
            raise SystemExit(f"{scenario} {arm}: the clocks measured different streams or groups")
        for group in sorted(w["groups"]):
            ids = [i for i in ws if ws[i]["group"] == group]
            wv = Counter(ws[i]["verdict"] for i in ids)
            vv = Counter(vs[i]["verdict"] for i in ids)
            gw, gv = w["groups"][group], v["groups"][group]
            t_w, t_v = gw["ttft_intended_s"]["median"], gv["ttft_intended_s"]["median"]
            d_w, d_v = gw["decode_tok_s"]["median"], gv["decode_tok_s"]["median"]
            worst_t = max(
                abs(_rel(ws[i]["ttft_intended_s"], vs[i]["ttft_intended_s"])) for i in ids
            )
            worst_d = max(abs(_rel(ws[i]["decode_tok_s"], vs[i]["decode_tok_s"])) for i in ids)
            out.append(
                (
                    scenario, arm, group, _verdicts(wv), _verdicts(vv),
                    "same" if wv == vv else "DIFFER",
                    f"{t_w:.3f}", f"{t_v:.3f}", pct(t_w, t_v), f"{worst_t * 100:.2f}%",
                    f"{d_w:.1f}", f"{d_v:.1f}", pct(d_w, d_v), f"{worst_d * 100:.2f}%",
                )
            )  # fmt: skip
            at = f"{scenario} {group}" if arm == "-" else f"{scenario} {arm} {group}"
            ratios.append(ratio(f"median TTFT, virtual / wall clock, {at}", t_v, t_w, "s", ".4g"))
            ratios.append(ratio(f"median decode tok/s, virtual / wall clock, {at}", d_v, d_w,
                                "tok/s", ".1f"))  # fmt: skip
    return out, ratios


def _rel(a: float | None, b: float | None) -> float:
    return 0.0 if a in (None, 0) or b is None else (b - a) / a


def _verdicts(c: Counter) -> str:
    return " ".join(f"{k}:{n}" for k, n in sorted(c.items()))


HEADER = (
    "scenario", "arm", "group", "verdicts wall", "verdicts virtual", "", "TTFT wall s",
    "TTFT virt s", "diff", "worst stream", "decode wall tok/s", "decode virt", "diff",
    "worst stream",
)  # fmt: skip


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("scenarios", nargs="*")
    ap.add_argument("--wall", type=Path, action="append", default=[])
    ap.add_argument("--virtual", type=Path, action="append", default=[])
    args = ap.parse_args()
    if len(args.wall) != len(args.virtual):
        raise SystemExit("--wall and --virtual come in pairs")
    scenarios = args.scenarios
    if not scenarios and not args.wall:
        scenarios = SMOKE_SCENARIOS if args.smoke else DEFAULT_SCENARIOS
    table: list[tuple[str, ...]] = []
    ratios: list[Ratio] = []
    for w, v in zip(args.wall, args.virtual, strict=True):
        got, rs = rows(w.name.split("-", 1)[-1], w, v)
        table, ratios = table + got, ratios + rs
    with tempfile.TemporaryDirectory() as tmp:
        for name in scenarios:
            w, tw = run(name, "wall", Path(tmp) / name / "wall")
            v, tv = run(name, "virtual", Path(tmp) / name / "virtual")
            print(f"{name}: wall clock {tw:.1f} s, virtual clock {tv:.1f} s (incl. report)")
            ratios.append(ratio(f"run time incl. report, wall / virtual clock, {name}", tw, tv,
                                "s", ".1f"))  # fmt: skip
            got, rs = rows(name, w, v)
            table, ratios = table + got, ratios + rs
    print("| " + " | ".join(HEADER) + " |")
    print("|" + "---|" * len(HEADER))
    for r in table:
        print("| " + " | ".join(r) + " |")
    report(ratios, args.ratios)


if __name__ == "__main__":
    main()
