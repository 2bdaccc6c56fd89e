"""The same scenarios on the wall-clock sim (over HTTP) and on the virtual clock, side by side.

    .venv/bin/python bench/virtual_vs_wall.py whale_c4 politeness ladder whale_c4_cached

Runs each scenario both ways (or reads existing run directories: --wall DIR --virtual DIR, in
pairs) and prints, per arm and group: the verdicts each clock gave, median TTFT (from the
intended send) and median decode-only rate, and the largest per-stream difference. The wall
clock is only as good as the machine is idle: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from loadgen.analysis.inputs import arm_dirs
from loadgen.analysis.summary import analyze_run


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


def rows(scenario: str, wall: Path, virtual: Path) -> list[tuple[str, ...]]:
    out = []
    w_arms, v_arms = per_arm(wall), per_arm(virtual)
    for arm in w_arms:
        w, v = w_arms[arm], v_arms[arm]
        ws = {s["id"]: s for s in w["streams"] if s["phase"] == "measure"}
        vs = {s["id"]: s for s in v["streams"] if s["phase"] == "measure"}
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
    return out


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
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenarios", nargs="*")
    ap.add_argument("--wall", type=Path, action="append", default=[])
    ap.add_argument("--virtual", type=Path, action="append", default=[])
    args = ap.parse_args()
    table: list[tuple[str, ...]] = []
    for w, v in zip(args.wall, args.virtual, strict=True):
        table += rows(w.name.split("-", 1)[-1], w, v)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.scenarios:
            w, tw = run(name, "wall", Path(tmp) / name / "wall")
            v, tv = run(name, "virtual", Path(tmp) / name / "virtual")
            print(f"{name}: wall clock {tw:.1f} s, virtual clock {tv:.1f} s (incl. report)")
            table += rows(name, w, v)
    print("| " + " | ".join(HEADER) + " |")
    print("|" + "---|" * len(HEADER))
    for r in table:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
