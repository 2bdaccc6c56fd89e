"""`--ray ADDRESS`: workers as Ray actors on a local Ray cluster started here (make test-ray).

Skipped without the `ray` extra. Two nodes on loopback (a head and a worker node, 2 CPUs each)
serve the whole module and are stopped (no raylet or gcs_server left) when it ends.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path

import orjson
import pytest

from loadgen.client.endpoint import Timeouts
from loadgen.client.pool import Job, WorkerClient
from loadgen.client.ray_pool import RayPool
from loadgen.records import read_streams
from loadgen.request import StreamRequest

from support.cli import assert_one_line_error, loadgen, spawn_loadgen
from support.pacedserver import PacedConfig, ThreadedPacedServer
from support.ray_cluster import free_port, local_ray_cluster, ray_processes
from support.workers import (
    OPEN_LOOP_VERDICTS,
    hist_counts,
    run_spread,
    server_verdicts,
    stream_rows,
)

pytestmark = [
    pytest.mark.ray,
    pytest.mark.skipif(
        find_spec("ray") is None, reason="needs the ray extra: pip install 'loadgen[ray]'"
    ),
]


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    with local_ray_cluster(extra_nodes=1) as cluster:
        yield cluster.address


@pytest.fixture
def sim_url() -> Iterator[str]:
    """`loadgen sim` on 127.0.0.1, a free port, until the test ends."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadgen", "sim", "--port", "0", "--max-num-seqs", "8"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            if line.startswith("Listening on "):
                yield line.removeprefix("Listening on ").strip()
                break
        else:
            pytest.fail("the sim exited before listening")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)


def test_two_ray_workers_merge_into_one_run_directory(
    ray_address: str, sim_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    res = loadgen(
        "request", "--base-url", sim_url, "--ray", ray_address, "--workers", "2",
        "-n", "12", "-c", "4", "--max-tokens", "8", "--prompt-tokens", "16", "--out", out,
    )  # fmt: skip
    assert res.returncode in (0, 3), res.stderr  # 3: the busy test machine limited the client
    recs = read_streams(out)
    ids = sorted(f"default/r0/request/{i}" for i in range(12))
    assert sorted(r.id for r in recs) == ids  # each exactly once
    assert {(r.status, r.completion_tokens) for r in recs} == {("ok", 8)}
    # Stamped on the run clock: no stream left before it was meant to, nor before the run.
    assert all(0 <= r.t_intended_ns <= r.t_sent_ns < r.t_first_ns for r in recs)
    manifest = orjson.loads((out / "run.json").read_bytes())
    workers = manifest["client"]["ray"]["workers"]
    names = {w["worker"] for w in workers}
    assert len(names) == 2 and Counter(r.worker for r in recs) == {n: 6 for n in names}
    # One per node. (Ray's default scheduling spreads two 1-CPU actors here too, so this shows
    # the workers span the cluster, not that SPREAD was asked for.)
    assert len({w["node_id"] for w in workers}) == 2
    for w in workers:  # same host: one CLOCK_MONOTONIC, and the estimate must agree with it
        assert w["clock"] == "shared" and w["clock_offset_ns"] == 0
        assert abs(w["estimated_offset_ns"]) <= w["offset_rtt_ns"] // 2 + 1
    report = loadgen("report", out)
    assert report.returncode == 0, report.stderr
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert sorted(s["id"] for s in summary["streams"]) == sorted(r.id for r in recs)


def stalled(rid: str) -> StreamRequest:
    return StreamRequest(
        id=rid, model="paced", prompt="alpha bravo", max_tokens=4, extra_body={"fault": "stall"}
    )


def quick(rid: str) -> StreamRequest:
    return StreamRequest(id=rid, model="paced", prompt="alpha bravo", max_tokens=4)


async def test_killed_actor_loses_no_completed_record(ray_address: str) -> None:
    """Worker 0 streams a0..a2 one at a time, then a stream that stalls; it is SIGKILLed once
    the stall has sent its 2 chunks (the server's clock: >= one TTFT after a2 ended, while a
    record reaches the parent within a round trip). Worker 1 is left alone."""
    cfg = PacedConfig(ttft_s=0.05, gap_s=0.01, stall_s=60)
    jobs = [
        Job((quick("a0"), quick("a1"), quick("a2"), stalled("a3")), 1),
        Job(tuple(quick(f"b{i}") for i in range(4)), 1),
    ]
    got: list = []
    with ThreadedPacedServer(cfg) as srv:
        client = WorkerClient(srv.url, None, Timeouts(), time.perf_counter_ns())
        async with RayPool(ray_address, 2, client, seats=1) as pool:
            victim = pool.manifest()[0]
            run = asyncio.create_task(pool.run(jobs, lambda rec, line=None: got.append(rec)))
            while not any(s.request_id == "a3" and len(s.send_ns) >= 2 for s in srv.served):
                assert not run.done(), run
                await asyncio.sleep(0.01)
            os.kill(victim["pid"], signal.SIGKILL)
            problems = await asyncio.wait_for(run, 60)
    assert sorted(r.id for r in got) == ["a0", "a1", "a2", "b0", "b1", "b2", "b3"]
    assert all(r.status == "ok" for r in got)
    assert len(problems) == 1 and victim["worker"] in problems[0]


def test_no_ray_process_outlives_its_cluster() -> None:
    with local_ray_cluster(extra_nodes=1) as cluster:
        assert ray_processes(cluster.temp_dir)  # the check sees the running head
    assert ray_processes(cluster.temp_dir) == []


def test_ctrl_c_writes_every_in_flight_streams_record(ray_address: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    with ThreadedPacedServer(PacedConfig(ttft_s=0.05, gap_s=0.2)) as srv:
        proc = spawn_loadgen(
            ["request", "--base-url", srv.url, "--ray", ray_address, "--workers", "2",
             "-n", "8", "-c", "4", "--max-tokens", "200", "--prompt-tokens", "4", "--out", out]
        )  # fmt: skip
        deadline = time.monotonic() + 90
        while sum(len(s.send_ns) >= 2 for s in srv.served) < 4:  # all 4 streaming
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    recs = read_streams(out)
    assert sorted(r.id for r in recs) == [f"default/r0/request/{i}" for i in range(4)]
    assert [r.error.cls for r in recs if r.error] == ["cancelled"] * 4
    assert all(r.chunks >= 2 for r in recs)


def test_an_address_no_head_answers_fails_in_one_line() -> None:
    dead = f"127.0.0.1:{free_port()}"
    with ThreadedPacedServer(PacedConfig()) as srv:
        proc = loadgen("request", "--base-url", srv.url, "--ray", dead, timeout_s=60)
    assert f"--ray {dead}: no Ray head answers there" in assert_one_line_error(proc)


def test_run_on_two_ray_workers_writes_the_run_directory_one_process_would(
    ray_address: str, tmp_path: Path
) -> None:
    one = run_spread(tmp_path / "w1", "--workers", "1")
    two = run_spread(tmp_path / "ray2", "--ray", ray_address, "--workers", "2")
    s1, s2 = stream_rows(one), stream_rows(two)
    key = lambda r: (r["id"], r["phase"], r["status"], r["completion_tokens"], r["chunks"])  # noqa: E731
    assert len(s2) == 8 and sorted(map(key, s1)) == sorted(map(key, s2))
    # On the run clock: sent at the intended time, within uvloop's timers' 1 ms granularity
    # (measured: 120 of 300 sleeps ended early, by up to 0.41 ms); a wrong clock offset put
    # t_sent seconds off.
    assert all(0 < r["t_intended_ns"] - 1_000_000 <= r["t_sent_ns"] < r["t_first_ns"] for r in s2)
    sum1, sum2 = (orjson.loads((d / "summary.json").read_bytes()) for d in (one, two))
    assert server_verdicts(sum1) == server_verdicts(sum2) == OPEN_LOOP_VERDICTS
    assert hist_counts(one) == hist_counts(two) != {}
    client = orjson.loads((two / "run.json").read_bytes())["client"]
    names = {w["worker"] for w in client["ray"]["workers"]}
    assert client["workers"] == 2 and len(names) == 2
    assert Counter(r["worker"] for r in s2) == {n: 4 for n in names}


def test_two_ray_actors_each_route_two_sim_replicas_on_their_own(
    ray_address: str, tmp_path: Path
) -> None:
    # spread's eight streams sent at once, dealt r0 r2 r4 r6 to actor 0 and r1 r3 r5 r7 to
    # actor 1 (send order), each routing round-robin over the two sims with its own router.
    run_dir = run_spread(tmp_path, "--sim-replicas", "2", "--ray", ray_address, "--workers", "2")
    recs = read_streams(run_dir)
    replica = {r.id.rsplit("/", 1)[1]: r.replica for r in recs}
    assert replica == {"0": 0, "2": 1, "4": 0, "6": 1, "1": 0, "3": 1, "5": 0, "7": 1}
    assert all(r.status == "ok" for r in recs)
    client = orjson.loads((run_dir / "run.json").read_bytes())["client"]
    assert len({w["worker"] for w in client["ray"]["workers"]}) == 2
