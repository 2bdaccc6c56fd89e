"""A local Ray cluster for tests: one head started with `ray start --block` on loopback, in a
short temp dir, with 2 CPUs and no dashboard; stopped (its whole process group, then anything
still running from its temp dir) when the test module ends."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

START_TIMEOUT_S = 90
STOP_TIMEOUT_S = 30


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_processes(temp_dir: str) -> list[int]:
    """Pids of live processes whose command line names `temp_dir` (every Ray process of the
    cluster does: it is the session directory's parent)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if temp_dir.encode() in cmd and int(entry.name) != os.getpid():
            pids.append(int(entry.name))
    return pids


@dataclass(frozen=True)
class Cluster:
    address: str  # 127.0.0.1:PORT, the head's GCS
    temp_dir: str  # every process of the cluster names it on its command line


@contextmanager
def local_ray_cluster(*, extra_nodes: int = 0, cpus: int = 2) -> Iterator[Cluster]:
    """Yields the running cluster (a head, plus `extra_nodes` worker nodes on this host, each
    with `cpus` CPUs); it is gone on exit."""
    # Ray's unix sockets live under the temp dir and their paths are capped near 107 bytes:
    # pytest's tmp_path is too deep.
    temp_dir = tempfile.mkdtemp(prefix="lgray", dir="/tmp")
    port = free_port()
    ray_bin = str(Path(sys.executable).with_name("ray"))
    log = open(Path(temp_dir) / "start.log", "w+")  # noqa: SIM115 - read while it runs
    proc = subprocess.Popen(
        [ray_bin, "start", "--head", "--block", f"--port={port}", f"--num-cpus={cpus}",
         "--node-ip-address=127.0.0.1", "--include-dashboard=false", "--disable-usage-stats",
         f"--temp-dir={temp_dir}"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
    )  # fmt: skip
    nodes = [proc]
    try:
        _wait_started(proc, Path(log.name))
        for _ in range(extra_nodes):
            nodes.append(_start_node(f"127.0.0.1:{port}", log, cpus))
            _wait_started(nodes[-1], Path(log.name), seen=len(nodes))
        yield Cluster(f"127.0.0.1:{port}", temp_dir)
    finally:
        for node in reversed(nodes):
            _stop(node, temp_dir, last=node is proc)
        log.close()
        shutil.rmtree(temp_dir, ignore_errors=True)


def _start_node(address: str, log: Any, cpus: int) -> subprocess.Popen:
    """A worker node joining `address`; its agents get free ports (the defaults are the
    head's)."""
    ray_bin = str(Path(sys.executable).with_name("ray"))
    agents = ("dashboard-agent-listen-port", "runtime-env-agent-port", "metrics-export-port")
    ports = [f"--{name}={free_port()}" for name in agents]
    return subprocess.Popen(
        [ray_bin, "start", "--block", f"--address={address}", f"--num-cpus={cpus}",
         "--node-ip-address=127.0.0.1", "--disable-usage-stats", *ports],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
    )  # fmt: skip


def _wait_started(proc: subprocess.Popen, log: Path, seen: int = 1) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while log.read_text().count("Ray runtime started") < seen:
        if proc.poll() is not None:
            raise RuntimeError(f"ray start exited {proc.returncode}:\n{log.read_text()[-2000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"ray start not up in {START_TIMEOUT_S} s")
        time.sleep(0.2)


def _stop(proc: subprocess.Popen, temp_dir: str, *, last: bool) -> None:
    """SIGINT to `ray start --block` (it then stops every process it started: SIGTERM it
    ignores); after the last node, SIGKILL, by pid, to whatever of this cluster is left."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
    if not last:
        return
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while ray_processes(temp_dir) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in ray_processes(temp_dir):
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
