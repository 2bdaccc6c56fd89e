"""Rewrites README's table of `vllm bench serve` flags from loadgen/commands/bench_serve.py
(MAPPED and REFUSED), so the two stay one: `python tools/bench_flags_table.py`.
tests/commands/test_bench_serve.py fails when they differ."""

from __future__ import annotations

import re
from pathlib import Path

from loadgen.commands.bench_serve import flag_table

README = Path(__file__).resolve().parents[1] / "README.md"
# The table: its header row and every row after it, up to the first line that is no row.
TABLE = re.compile(r"^\| `vllm bench serve` flag \|.*?\n(?=[^|])", re.S | re.M)


def main() -> None:
    text = README.read_text()
    new, n = TABLE.subn(flag_table() + "\n", text)
    if n != 1:
        raise SystemExit(f"{README}: expected one flag table, found {n}")
    README.write_text(new)


if __name__ == "__main__":
    main()
