"""`--sim-replicas N` on the wall clock: N sim servers on their own 127.0.0.1 ports behind the
route, each with its own cache and /metrics, and a least-outstanding route sees them all."""

from __future__ import annotations

from pathlib import Path

import orjson

from loadgen.analysis.inputs import read_manifest
from loadgen.records import read_streams

from support.cli import loadgen


def test_sim_replicas_boot_one_server_each_and_share_the_streams(tmp_path: Path) -> None:
    args = ["run", "smoke", "--sim-replicas", "3", "--route", "least-outstanding"]
    result = loadgen(*args, "--no-progress", "--out", tmp_path)
    assert result.returncode == 0, result.stderr
    (run_dir,) = list(tmp_path.iterdir())
    targets = read_manifest(run_dir).targets
    assert targets is not None
    urls = targets.urls
    assert len(set(urls)) == 3 and all(u.startswith("http://127.0.0.1:") for u in urls)
    assert targets.route == "least-outstanding"
    assert sorted(p.name for p in (run_dir / "replicas").iterdir()) == ["0", "1", "2"]
    # smoke's four streams start together: the fewest-in-flight rule gives each replica one
    # before any gets a second (0, 1, 2, then whichever has fewest by then: 0 unless a stream
    # already ended, which a busy box may allow).
    recs = read_streams(run_dir)
    assert len(recs) == 4 and {r.replica for r in recs} == {0, 1, 2}
    samples = [orjson.loads(x) for x in (run_dir / "replica_metrics.jsonl").read_bytes().split()]
    # Over the run (the boot's readiness request is before the first sample).
    first: dict[int, float] = {}
    served: dict[int, float] = {}
    for s in samples:
        first.setdefault(s["replica"], s["values"]["prompt_tokens_total"])
        served[s["replica"]] = s["values"]["prompt_tokens_total"] - first[s["replica"]]
    by_replica = {i: sum(r.prompt_tokens or 0 for r in recs if r.replica == i) for i in range(3)}
    assert served == by_replica  # each server's own counter holds its own streams only


def test_worker_processes_each_route_their_share_over_every_replica(tmp_path: Path) -> None:
    args = ["run", "smoke", "--sim-replicas", "2", "--workers", "2", "--route", "round-robin"]
    result = loadgen(*args, "--no-progress", "--out", tmp_path)
    assert result.returncode == 0, result.stderr
    (run_dir,) = list(tmp_path.iterdir())
    client = orjson.loads((run_dir / "run.json").read_bytes())["client"]
    assert client["workers"] == 2 and len(client["worker_processes"]) == 2
    # smoke's four streams are dealt in plan order (long/0, short/0, short/1, short/2) to
    # workers 0, 1, 0, 1, and each worker's own round-robin starts at replica 0: one router in
    # the parent would have given short/0 replica 1 and short/1 replica 0.
    replicas = {r.id.split("/", 2)[2]: r.replica for r in read_streams(run_dir)}
    assert replicas == {"long/0": 0, "short/0": 0, "short/1": 1, "short/2": 1}
    assert all(r.status == "ok" for r in read_streams(run_dir))
