"""Checks before a run starts: open-file limit against the concurrency (issue #10 item 5)."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

from loadgen.client.openai import AUX_CONNECTIONS
from loadgen.client.rawhttp import FDS_PER_CONNECTION
from loadgen.engine.preflight import FD_MARGIN

from support.cli import assert_one_line_error, loadgen

# Two descriptors a stream connection (its socket and the dup TCP_INFO is read through).
NEEDED_FOR_512 = 512 * FDS_PER_CONNECTION + AUX_CONNECTIONS + FD_MARGIN


def _limit(soft: int, hard: int):
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_run_refuses_a_concurrency_beyond_the_hard_open_file_limit(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    proc = loadgen(
        "run", "smoke", "--set", "groups.short.count=511", "--out", out, "--no-progress",
        preexec_fn=_limit(256, 256),
    )  # fmt: skip
    line = assert_one_line_error(proc)
    needed = NEEDED_FOR_512
    assert (
        f"512 concurrent streams need {needed} open files, but the limit is 256 (hard 256)" in line
    )
    assert f"ulimit -n {needed}" in line
    assert not out.exists() or not any(out.iterdir())


def test_the_soft_open_file_limit_is_raised_when_the_hard_one_allows() -> None:
    code = (
        "import resource; from loadgen.engine.preflight import ensure_fd_limit; "
        "ensure_fd_limit(512); print(*resource.getrlimit(resource.RLIMIT_NOFILE))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
        preexec_fn=_limit(256, 4096),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(NEEDED_FOR_512), "4096"]


def test_a_virtual_run_needs_no_descriptor_per_stream(tmp_path: Path) -> None:
    # The same 512 streams under a 256-file limit: the virtual clock opens no connections.
    out = tmp_path / "runs"
    proc = loadgen(
        "run", "smoke", "--set", "groups.short.count=511", "--out", out, "--no-progress",
        "--clock", "virtual", preexec_fn=_limit(256, 256),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "open files" not in proc.stderr
