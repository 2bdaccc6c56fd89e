"""Nothing loadgen starts outlives a SIGKILL of loadgen (issue 20): every process carrying a
test's mark in its environment is gone soon after the parent is killed."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from support.cli import spawn_loadgen
from support.pacedserver import PacedConfig, ThreadedPacedServer

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


FORKING_SERVER = (
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
    "time.sleep(120)\n"
)


def _grandchildren(mark: str) -> list[int]:
    """Marked processes that are the forking server's own child."""
    child = b"import time; time.sleep(120)"
    return [
        p for p in _marked(mark) if child in Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")
    ]


def test_a_sigkilled_run_leaves_no_child_of_a_command_server_behind(tmp_path: Path) -> None:
    # The command's server forks a child of its own: PR_SET_PDEATHSIG alone reaches the
    # server and left that child running under PID 1.
    mark = uuid.uuid4().hex
    command = [sys.executable, "-c", FORKING_SERVER, "{port}"]
    scenario = tmp_path / "forks.yaml"
    scenario.write_text(
        "name: forks\nseed: 1\n"
        "groups:\n  - {name: g, count: 1, prompt: {tokens: 16}, max_tokens: 4}\n"
        f"server:\n  kind: command\n  boot_timeout_s: 60\n  command: {json.dumps(command)}\n"
    )
    proc = spawn_loadgen(
        ["run", scenario, "--out", tmp_path / "runs", "--no-progress"],
        env={**os.environ, MARK_ENV: mark},
    )
    try:
        _poll("the server's child", lambda: _grandchildren(mark) != [])
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=WAIT_S)
        _poll("every marked process to exit", lambda: _marked(mark) == [])
    finally:
        proc.kill()
        for pid in _marked(mark):
            os.kill(pid, signal.SIGKILL)
        proc.communicate()


def test_a_stopped_server_releases_its_watchdog(tmp_path: Path) -> None:
    from loadgen.lifeline import _WATCHDOGS
    from loadgen.server.launcher import _spawn, stop_process_group

    mark = uuid.uuid4().hex
    os.environ[MARK_ENV] = mark
    try:
        proc = _spawn([sys.executable, "-c", FORKING_SERVER], {}, tmp_path / "srv.log")
    finally:
        del os.environ[MARK_ENV]
    _poll("the server's child", lambda: _grandchildren(mark) != [])
    watchdog = _WATCHDOGS[proc.pid][1]
    stop_process_group(proc, grace_s=1.0)
    assert proc.pid not in _WATCHDOGS
    assert watchdog.returncode == 0  # it left on the all-clear, not by a signal
    _poll("every marked process to exit", lambda: _marked(mark) == [])


def _workers(mark: str) -> list[int]:
    """Marked client worker processes (spawned by multiprocessing, not its resource tracker)."""
    return [p for p in _marked(mark) if b"spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes()]


def test_a_run_whose_worker_is_sigkilled_names_the_lost_streams_and_exits_4(
    tmp_path: Path,
) -> None:
    from loadgen.commands.run import FAILED_STREAMS_EXIT

    mark = uuid.uuid4().hex
    # Streams of ~3 s (300 tokens 10 ms apart): both workers hold streams when one is killed.
    with ThreadedPacedServer(PacedConfig(ttft_s=0.0, gap_s=0.01)) as srv:
        proc = spawn_loadgen(
            ["run", "smoke", "--base-url", srv.url, "--out", tmp_path, "--no-progress",
             "--workers", "2", "--set=groups.short.max_tokens=300",
             "--set=groups.long.max_tokens=300"],
            env={**os.environ, MARK_ENV: mark},
        )  # fmt: skip
        try:
            _poll("every stream at the server", lambda: srv.arrivals >= 4)
            os.kill(_workers(mark)[0], signal.SIGKILL)
            out, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
    assert proc.returncode == FAILED_STREAMS_EXIT, (out, err)
    assert "have no record: a client worker died" in out + err
