"""`loadgen request --workers N`: the same streams split across processes, merged records."""

from __future__ import annotations

from collections import Counter
from contextlib import AsyncExitStack
from pathlib import Path

from click.testing import CliRunner

from loadgen.cli import main
from loadgen.client.endpoint import Timeouts
from loadgen.client.openai import OpenAIClient
from loadgen.client.pool import (
    WorkerClient,
    auto_workers,
    open_worker_sender,
    seat_share,
    split_jobs,
)
from loadgen.client.routed import RoutedClient
from loadgen.client.routing import RoutePolicy, RouteSpec
from loadgen.records import read_streams
from loadgen.request import StreamRequest

from support.pacedserver import PacedConfig, ThreadedPacedServer


def _reqs(offsets_ms: list[int]) -> list[StreamRequest]:
    return [
        StreamRequest(id=f"r{i}", model="m", prompt="p", max_tokens=1, t_intended_ns=ms * 1_000_000)
        for i, ms in enumerate(offsets_ms)
    ]


def test_a_closed_loop_is_dealt_round_robin_with_its_seats_shared() -> None:
    jobs = split_jobs(_reqs([0] * 7), 5, 3)
    assert [[r.id for r in j.requests] for j in jobs] == [
        ["r0", "r3", "r6"],
        ["r1", "r4"],
        ["r2", "r5"],
    ]
    assert [j.concurrency for j in jobs] == [2, 2, 1]
    assert [seat_share(1, 2, i) for i in range(2)] == [1, 1]  # every worker gets a seat
    assert [len(j.requests) for j in split_jobs(_reqs([0]), 1, 2)] == [1]  # no empty job


def test_an_open_loop_is_dealt_in_send_order_so_every_burst_is_shared() -> None:
    jobs = split_jobs(_reqs([30, 0, 20, 10]), None, 2)
    assert [[r.id for r in j.requests] for j in jobs] == [["r1", "r2"], ["r3", "r0"]]
    assert {j.concurrency for j in jobs} == {None}


def test_an_open_loops_cap_is_shared_and_never_summed_past_it() -> None:
    jobs = split_jobs(_reqs([0, 10, 20, 30, 40]), None, 4, cap=5)
    assert [j.cap for j in jobs] == [2, 1, 1, 1] and {j.concurrency for j in jobs} == {None}
    # Fewer seats than workers: as many jobs as seats, one seat each.
    jobs = split_jobs(_reqs([0, 10, 20, 30, 40]), None, 4, cap=2)
    assert [[r.id for r in j.requests] for j in jobs] == [["r0", "r2", "r4"], ["r1", "r3"]]
    assert [j.cap for j in jobs] == [1, 1]


def test_auto_workers_aims_at_256_streams_per_process_within_the_cores() -> None:
    assert auto_workers(64, server_on_host=False, cores=8) == 1
    assert auto_workers(1024, server_on_host=False, cores=8) == 4
    assert auto_workers(1024, server_on_host=False, cores=2) == 2
    assert auto_workers(1024, server_on_host=True, cores=2) == 1  # a core left to the server
    assert auto_workers(5000, server_on_host=True, cores=8) == 7


async def test_a_worker_streams_to_its_server_or_routes_over_every_replica() -> None:
    one = WorkerClient("http://127.0.0.1:9", None, Timeouts(), 0)
    route = RouteSpec(RoutePolicy.LEAST_OUTSTANDING)
    urls = ("http://127.0.0.1:9", "http://127.0.0.1:10", "http://127.0.0.1:11")
    several = WorkerClient(urls[0], None, Timeouts(), 0, urls, route)
    async with AsyncExitStack() as stack:  # opening a client connects to nothing yet
        alone = await open_worker_sender(one, 4, stack)
        routed = await open_worker_sender(several, 4, stack)
    assert isinstance(alone, OpenAIClient)
    assert isinstance(routed, RoutedClient)
    assert [c.base_url for c in routed.clients] == list(urls)
    assert routed.router.spec == route and routed.router.replicas == 3


def probe(url: str, out: Path, workers: int) -> list:
    res = CliRunner().invoke(
        main,
        ["request", "--base-url", url, "-n", "12", "-c", "4", "--max-tokens", "6",
         "--prompt-tokens", "4", "--workers", str(workers), "--out", str(out)],
    )  # fmt: skip
    assert res.exit_code in (0, 3), res.output  # 3: the busy test machine limited the client
    return read_streams(out)


def test_two_workers_give_the_same_records_as_one(tmp_path: Path) -> None:
    with ThreadedPacedServer(PacedConfig(ttft_s=0.02, gap_s=0.005)) as srv:
        one = probe(srv.url, tmp_path / "w1", 1)
        two = probe(srv.url, tmp_path / "w2", 2)
        served = Counter(s.request_id for s in srv.served)
    assert (
        sorted(r.id for r in one)
        == sorted(r.id for r in two)
        == sorted(f"default/r0/request/{i}" for i in range(12))
    )
    for recs in (one, two):
        assert {(r.status, r.completion_tokens, r.chunks, r.token_source) for r in recs} == {
            ("ok", 6, 6, "usage_continuous")
        }
    assert all(n == 2 for n in served.values())  # every stream sent once per run, none twice
    assert all(r.loop_lag_ttft_ns is not None for r in two)  # workers measure themselves too
