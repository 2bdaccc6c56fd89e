"""bench/client_ingest.py's floor loop, the reference of bench/ceiling.py's CPU a request: it
takes in every event the bare aiohttp loop does, and a server that closes its connections or
stops answering ends it with one line, not a hang."""

from __future__ import annotations

import asyncio

import pytest

from support.pacedserver import PacedConfig, PacedServer

ZERO_DELAY = PacedConfig(ttft_s=0, gap_s=0)


async def test_the_floor_takes_in_every_event_the_bare_loop_does(ceiling) -> None:
    from client_ingest import bare_rate, floor_rate

    async with PacedServer(ZERO_DELAY) as srv:
        floor = await floor_rate(srv.url, 3, 7, 5)
        bare = await bare_rate(srv.url, 3, 7, 5)
    # Five text events and the usage event an answer, counted alike by both loops.
    assert floor.events == bare.events == 7 * 6
    assert floor.ns > 0


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
