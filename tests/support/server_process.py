"""Servers in their own processes on 127.0.0.1, for tests that kill one or need one that never
answers: `loadgen sim` on a free port, and a socket that accepts and stays silent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from loadgen.records import read_jsonl

from support.cli import spawn_loadgen


@contextmanager
def sim_process(log: Path, *args: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`loadgen sim` in its own process on a free port, its output in `log` (a pipe nobody
    reads would fill and stall it); yields it and its URL."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "loadgen", "sim", "--port", "0", *args],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (url := _listening(log)):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.02)
        yield proc, url
    finally:
        proc.kill()
        proc.wait()


def _listening(log: Path) -> str | None:
    lines = [x for x in log.read_text().splitlines() if x.startswith("Listening on ")]
    return lines[0].split()[-1] if lines else None


@contextmanager
def silent_server() -> Iterator[str]:
    """A process that accepts every connection on a free port and never answers; yields its
    URL."""
    code = (
        "import socket, sys\n"
        "s = socket.create_server(('127.0.0.1', 0))\n"
        "print(s.getsockname()[1], flush=True)\n"
        "held = []\n"
        "while True:\n"
        "    held.append(s.accept()[0])\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield f"http://127.0.0.1:{int(proc.stdout.readline())}"
    finally:
        proc.kill()
        proc.wait()


def _records(out: Path) -> int:
    return sum(1 for d in out.iterdir() for _ in read_jsonl(d / "streams.jsonl"))


def run_until(
    kill_after: int, args: list[str], out: Path, kill: subprocess.Popen[bytes] | None
) -> tuple[int, str]:
    """Runs loadgen ARGS; SIGKILLs `kill` once `kill_after` records are on disk; (rc, its
    stdout and stderr)."""
    proc = spawn_loadgen([*args, "--no-progress", "--out", out])
    deadline = time.monotonic() + 120
    while kill is not None and proc.poll() is None and time.monotonic() < deadline:
        if out.exists() and any(out.iterdir()) and _records(out) >= kill_after:
            os.kill(kill.pid, signal.SIGKILL)
            break
        time.sleep(0.005)
    out_text, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    return proc.returncode, out_text + err
