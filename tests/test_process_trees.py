"""Nothing loadgen starts outlives a SIGKILL of loadgen (issue 20): every process carrying a
test's mark in its environment is gone soon after the parent is killed."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from cli_support import spawn_loadgen
from pacedserver import PacedConfig, ThreadedPacedServer

MARK_ENV = "LOADGEN_TEST_MARK"
WAIT_S = 20.0  # bound on a poll below, far above the ~1 s a worker pool takes to start


def _marked(mark: str) -> list[int]:
    """Pids of live processes whose environment holds MARK_ENV=mark."""
    needle = f"{MARK_ENV}={mark}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in env.split(b"\0") and state != "Z":
            pids.append(int(entry.name))
    return pids


def _poll(what: str, cond: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not cond():
        assert time.monotonic() < deadline, f"still waiting for {what} after {WAIT_S} s"
        time.sleep(0.05)


def test_a_sigkilled_run_leaves_no_worker_behind(tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    # Streams of ~20 s (2000 tokens 10 ms apart): the workers are busy when the kill lands.
    with ThreadedPacedServer(PacedConfig(ttft_s=0.0, gap_s=0.01)) as srv:
        proc = spawn_loadgen(
            ["run", "smoke", "--base-url", srv.url, "--out", tmp_path, "--no-progress",
             "--workers", "2", "--set=groups.short.max_tokens=2000"],
            env={**os.environ, MARK_ENV: mark},
        )  # fmt: skip
        try:
            # loadgen, its 2 workers and multiprocessing's resource tracker.
            _poll("2 workers", lambda: len(_marked(mark)) >= 4)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=WAIT_S)
            _poll("every marked process to exit", lambda: _marked(mark) == [])
        finally:
            proc.kill()
            for pid in _marked(mark):  # a failed check leaves nothing running (or holding
                os.kill(pid, signal.SIGKILL)  # the output pipes open) either
            proc.communicate()
