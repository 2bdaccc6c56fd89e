"""A Ray actor before several replicas streams as a worker process does: through its own
router over a client per replica, each record (a cancelled one too) naming its replica, every
client stamping against the run start the actor is handed. No cluster: the actor class runs
in-process with the one thing it asks of Ray (its node's address) stubbed."""

from __future__ import annotations

import sys
import time
import types

import orjson
import pytest

from loadgen.client.endpoint import Timeouts
from loadgen.client.pool import Job, WorkerClient, hand_on
from loadgen.client.ray_pool import StreamActor
from loadgen.records import StreamRecord, read_stream
from loadgen.request import StreamRequest

from support.pacedserver import PacedConfig, ThreadedPacedServer


def test_a_ray_actor_routes_its_streams_and_names_the_replica_of_each_cancelled_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ray = types.ModuleType("ray")
    ray.util = types.SimpleNamespace(get_node_ip_address=lambda: "127.0.0.1")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ray", ray)
    # Four streams at once, dealt round-robin: r0 and r1 (2 tokens) end at once; r2 and r3
    # (400 tokens 50 ms apart: 20 s) are still in flight when the actor is stopped.
    requests = [
        StreamRequest(id=f"r{i}", model="paced", prompt="alpha bravo", max_tokens=tokens)
        for i, tokens in enumerate([2, 2, 400, 400])
    ]
    slow = PacedConfig(ttft_s=0.0, gap_s=0.05)
    with ThreadedPacedServer(slow) as a, ThreadedPacedServer(slow) as b:
        # The parent's run start (0 here) means nothing on another host: run() hands its own.
        actor = StreamActor(WorkerClient(a.url, None, Timeouts(), 0, (a.url, b.url)), seats=4)
        actor.warm(4)
        actor.load(Job(tuple(requests), concurrency=4))
        run_start_ns = time.perf_counter_ns()
        got: list[StreamRecord] = []
        lines: list[bytes | None] = []
        for batch in actor.run(time.perf_counter_ns() - run_start_ns, run_start_ns):
            hand_on(batch, lambda rec, line=None: (got.append(rec), lines.append(line)))
            if len(got) == 2:
                actor.stop()
        served = [sorted(s.request_id for s in srv.served) for srv in (a, b)]
    # The lines the parent writes, a batch's with its first record: the records, in order.
    assert [read_stream(orjson.loads(x)) for x in b"".join(filter(None, lines)).splitlines()] == got
    by_id = {r.id: r for r in got}
    assert {i: (r.replica, r.status) for i, r in by_id.items()} == {
        "r0": (0, "ok"), "r1": (1, "ok"), "r2": (0, "error"), "r3": (1, "error"),
    }  # fmt: skip
    assert served == [["r0", "r2"], ["r1", "r3"]]
    assert [by_id[i].error.cls for i in ("r2", "r3")] == ["cancelled", "cancelled"]  # type: ignore[union-attr]
    assert {r.worker for r in got} == {actor.name} and actor.name.startswith("ray:127.0.0.1:")
    # Every client stamped against run()'s start: within seconds of it, not of 0.
    assert all(0 < (r.t_sent_ns or 0) < 10**10 for r in got)
