"""Whether a piece of work lets the event loop run other tasks: a task that counts its turns."""

from __future__ import annotations

import asyncio
from typing import Any


class LoopTurns:
    """`async with LoopTurns() as turns:` counts, in `turns.count`, the loop's turns while the
    block runs (a ticker task that yields every turn)."""

    def __init__(self) -> None:
        self.count = 0
        self._task: asyncio.Future[None] | None = None

    async def __aenter__(self) -> LoopTurns:
        self._task = asyncio.ensure_future(self._tick())
        await asyncio.sleep(0)  # the ticker's first turn, before the work
        return self

    async def __aexit__(self, *exc: Any) -> None:
        assert self._task is not None
        self._task.cancel()

    async def _tick(self) -> None:
        while True:
            self.count += 1
            await asyncio.sleep(0)
