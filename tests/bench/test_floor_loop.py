"""bench/client_ingest.py's floor loop, the reference of bench/ceiling.py's CPU a request: it
takes in every event the bare aiohttp loop does, and a server that closes its connections or
stops answering ends it with one line, not a hang; the ratio is taken from the best point
whose CPU was measured, and says so where none was."""

from __future__ import annotations

import asyncio
import math

import pytest
import uvloop

from support.pacedserver import PacedConfig, PacedServer

ZERO_DELAY = PacedConfig(ttft_s=0, gap_s=0)


async def test_the_floor_takes_in_every_event_the_bare_loop_does(ceiling) -> None:
    from client_ingest import bare_rate, floor_rate

    async with PacedServer(ZERO_DELAY) as srv:
        floor, cpu_s = await floor_rate(srv.url, 3, 7, 5)
        bare = await bare_rate(srv.url, 3, 7, 5)
    # Five text events and the usage event an answer, counted alike by both loops.
    assert floor.events == bare.events == 7 * 6
    assert floor.ns > 0
    assert cpu_s > 0


async def _closing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read(100)
    writer.close()


async def _silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read(1000)
    await reader.read()  # holds the connection, answering nothing, until the client goes


@pytest.mark.parametrize(
    ("server", "said"),
    [
        (_closing, "floor loop: the server closed a connection"),
        (_silent, "floor loop: no end of the answers in 0.2 s"),
    ],
)
async def test_a_server_that_fails_the_floor_loop_ends_it_in_one_line(
    ceiling, monkeypatch, server, said: str
) -> None:
    import client_ingest

    monkeypatch.setattr(client_ingest, "FLOOR_LIMIT_S", 0.2)
    srv = await asyncio.start_server(server, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        with pytest.raises(SystemExit) as exited:
            await client_ingest.floor_rate(f"http://127.0.0.1:{port}", 2, 4, 16)
    finally:
        srv.close()
        await srv.wait_closed()
    assert str(exited.value) == said


def point(ceiling, concurrency: int, req_s: float, client_cpu: float):
    """A 1-worker point of 5-token answers: the fields cpu_ratio reads, the rest 0."""
    return ceiling.Point(
        workers=1, servers=1, tokens=5, concurrency=concurrency, ok=20, req_s=req_s,
        in_flight=0, err_p50_ms=0, err_p99_ms=0, flagged=0, missed=0, server_cpu=0,
        client_cpu=client_cpu, parent_cpu=0, thread_cpu=0, host_cpu=0, bound="-", span_s=1,
        wall_s=1,
    )  # fmt: skip


def test_the_cpu_ratio_is_the_best_measured_point_over_the_floor(ceiling) -> None:
    # 100 req/s on 0.01 core: 100 us a request. The faster point's CPU went unmeasured.
    measured = point(ceiling, 3, 100.0, 0.01)
    short = point(ceiling, 8, 900.0, math.nan)

    async def beside_a_server():
        async with PacedServer(ZERO_DELAY) as srv:
            # cpu_ratio runs a loop of its own: in a thread, beside the server's.
            return await asyncio.to_thread(ceiling.cpu_ratio, srv.url, 5, [measured, short], 6)

    got = uvloop.run(beside_a_server())
    assert got.compared == "loadgen CPU a request / floor loop's, T=5 C=3 W=1"
    assert got.figures.startswith("100.0 / ") and got.value > 0
    none = ceiling.cpu_ratio("http://127.0.0.1:1", 5, [short], 6)
    assert none.compared == "loadgen CPU a request / floor loop's, T=5 W=1"
    assert none.value is None
    assert none.figures == "every 1-worker point too short for the CPU counters"
