"""The benches' shared parts, and every bench at once in one table.

A bench measures a speed of loadgen's as a ratio to a reference measured in the same run (a
bare read loop, the interpreter's own start, real time, another mode of the same code), so its
ratio compares across machines; the absolute figures are printed beside it, never judged.
Every bench takes `--smoke`: the same code path at a size that runs in seconds, for CI, where
it shows the bench still runs and its ratios can still be computed (exit 1 when not), never
how fast anything is. A reference tool that cannot be had (firehose without a C compiler) is
said in one line and its row shows `-`; loadgen's side still runs.

    .venv/bin/python bench/harness.py [--smoke] [--only NAME ...]

runs every other bench/*.py in a process of its own (`--help`, then the bench, each bounded),
then prints one table of all their ratios; exit 1 when any bench failed or gave no ratio.
"""

from __future__ import annotations

import argparse
import math
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson

BENCH = Path(__file__).resolve().parent
# Seconds a bench may run: a smoke is seconds, a full bench a minute or two on 2 cores.
SMOKE_LIMIT_S, FULL_LIMIT_S, HELP_LIMIT_S = 120, 600, 30


@dataclass(frozen=True)
class Ratio:
    """One comparison: `value` = the measured figure over its reference (None: the reference
    could not be had, `figures` says why)."""

    bench: str
    compared: str
    value: float | None
    figures: str


def ratio(
    compared: str, measured: float | None, reference: float | None, unit: str, fmt: str = ",.0f"
) -> Ratio:
    """measured / reference, or exit 1 naming the comparison when it cannot be computed (a
    figure missing, negative or not finite, or a reference of 0)."""
    bench = Path(sys.argv[0]).stem
    if not (_at_least(measured, 0) and _at_least(reference, sys.float_info.min)):
        raise SystemExit(f"{bench}: no ratio for {compared}: {measured} / {reference} {unit}")
    figures = f"{measured:{fmt}} / {reference:{fmt}} {unit}"
    return Ratio(bench, compared, measured / reference, figures)


def _at_least(x: float | None, low: float) -> bool:
    return x is not None and math.isfinite(x) and x >= low


def unavailable(compared: str, why: str) -> Ratio:
    """The row of a comparison whose reference tool is missing here: shown, not failed."""
    return Ratio(Path(sys.argv[0]).stem, compared, None, why)


def parser(doc: str) -> argparse.ArgumentParser:
    """A bench's options: its own, plus --smoke and --ratios (for this module's table)."""
    ap = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="the same code path at a size that runs in seconds: checks the bench runs",
    )
    ap.add_argument("--ratios", type=Path, help="append the ratios to FILE as JSON lines")
    return ap


def report(ratios: list[Ratio], out: Path | None) -> None:
    """Prints the bench's ratios (and appends them to `out`); exit 1 when there is none."""
    if not ratios:
        raise SystemExit(f"{Path(sys.argv[0]).stem}: no ratio measured")
    print(table(ratios))
    if out is not None:
        with out.open("ab") as f:
            f.writelines(orjson.dumps(asdict(r)) + b"\n" for r in ratios)


def table(ratios: list[Ratio]) -> str:
    head = ("bench", "compared", "ratio", "figures (measured / reference)")
    rows = [(r.bench, r.compared, "-" if r.value is None else f"{r.value:#.3g}", r.figures)
            for r in ratios]  # fmt: skip
    widths = [max(len(row[i]) for row in (head, *rows)) for i in range(3)]
    return "\n".join(
        "  ".join((row[0].ljust(widths[0]), row[1].ljust(widths[1]), row[2].rjust(widths[2]),
                   row[3]))
        for row in (head, *rows)
    )  # fmt: skip


def benches() -> list[Path]:
    """Every bench: each bench/*.py but this module, so a new one is run without a list."""
    return sorted(p for p in BENCH.glob("*.py") if p.name != Path(__file__).name)


def run_one(script: Path, smoke: bool, ratios: Path) -> str | None:
    """Runs `script --help`, then the bench; None, or why it failed, in one line."""
    t0 = time.perf_counter()
    try:
        helped = subprocess.run(
            [sys.executable, str(script), "--help"], capture_output=True, timeout=HELP_LIMIT_S
        )
    except subprocess.TimeoutExpired:
        return f"--help took over {HELP_LIMIT_S} s"
    if helped.returncode != 0 or not re.search(rb"^ +--smoke\b", helped.stdout, re.MULTILINE):
        return f"--help exited {helped.returncode} without offering --smoke"
    help_s = time.perf_counter() - t0
    cmd = [sys.executable, str(script), *(["--smoke"] if smoke else []), "--ratios", str(ratios)]
    print(f"== {script.name}{' --smoke' if smoke else ''} (--help {help_s:.1f} s)", flush=True)
    limit = SMOKE_LIMIT_S if smoke else FULL_LIMIT_S
    t0 = time.perf_counter()
    try:
        rc = subprocess.run(cmd, timeout=limit).returncode
    except subprocess.TimeoutExpired:
        return f"ran over {limit} s"
    print(f"== {script.name}: exit {rc} in {time.perf_counter() - t0:.1f} s", flush=True)
    return None if rc == 0 else f"exited {rc}"


def read_ratios(path: Path) -> list[Ratio]:
    if not path.exists():
        return []
    return [Ratio(**orjson.loads(line)) for line in path.read_bytes().splitlines()]


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--smoke", action="store_true", help="every bench at its smoke size (CI)")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="these benches (file stems) only")
    args = ap.parse_args()
    scripts = [p for p in benches() if not args.only or p.stem in args.only]
    if args.only and len(scripts) != len(set(args.only)):
        known = ", ".join(p.stem for p in benches())
        raise SystemExit(f"--only: unknown bench in {' '.join(args.only)} (known: {known})")
    failed: dict[str, str] = {}
    found: list[Ratio] = []
    with tempfile.TemporaryDirectory() as tmp:
        for script in scripts:
            out = Path(tmp) / f"{script.stem}.jsonl"
            why = run_one(script, args.smoke, out)
            got = read_ratios(out)
            if why is None and not got:
                why = "gave no ratio"
            if why is not None:
                failed[script.stem] = why
            found += got
    print()
    print(table(found) if found else "no ratios")
    for name, why in failed.items():
        print(f"FAILED {name}: {why}")
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
