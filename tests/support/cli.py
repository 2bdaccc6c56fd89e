"""Running the `loadgen` CLI in a subprocess for tests: bounded in time, output captured."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

CLI_TIMEOUT_S = 120


def loadgen(
    *args: str | Path,
    timeout_s: float = CLI_TIMEOUT_S,
    env: dict[str, str] | None = None,
    preexec_fn: Callable[[], None] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`python -m loadgen ARGS` to completion; raises TimeoutExpired past `timeout_s`."""
    return subprocess.run(
        [sys.executable, "-m", "loadgen", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, **(env or {})},
        preexec_fn=preexec_fn,
    )


def spawn_loadgen(args: Sequence[str | Path], **kw: object) -> subprocess.Popen[str]:
    """`python -m loadgen ARGS` started in the background, output captured."""
    return subprocess.Popen(
        [sys.executable, "-m", "loadgen", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,  # type: ignore[arg-type]
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    """The CLI failed with one `Error:` line and no traceback; returns that line."""
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def rewrites_identically(root: Path, *names: str) -> bool:
    """`loadgen report ROOT` writes each named file again (each is removed first, so one the
    report leaves alone fails), byte for byte."""
    before = {name: (root / name).read_bytes() for name in names}
    for name in names:
        (root / name).unlink()
    proc = loadgen("report", root)
    assert proc.returncode == 0, proc.stderr
    return {name: (root / name).read_bytes() for name in names if (root / name).exists()} == before
