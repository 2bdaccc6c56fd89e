"""The clock a run is driven on, chosen once: what each clock's arm backend needs and how it is
opened. Everything else asks the chosen ClockKind, never the clock's name."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.clock import ClockName
from loadgen.engine.arm import ArmBackend, ArmOpening
from loadgen.engine.http_backend import open_wall_backend
from loadgen.engine.options import RunOptions
from loadgen.engine.target import Target, launch_target
from loadgen.scenario.model import Scenario
from loadgen.scenario.plan import plan

# How a clock's backend opens for an arm.
OpenBackend = Callable[[ArmOpening], AbstractAsyncContextManager[ArmBackend]]


def _open_virtual_backend(opening: ArmOpening) -> AbstractAsyncContextManager[ArmBackend]:
    """open_virtual_backend, imported when the virtual clock runs: the sim's engine is no part
    of a wall run, and `loadgen request` loads none of it (tests/commands/test_startup.py)."""
    from loadgen.engine.virtual_run import open_virtual_backend

    return open_virtual_backend(opening)


@dataclass(frozen=True, slots=True)
class ClockKind:
    name: ClockName
    # Each request holds a socket: the descriptor limit must fit the arm's peak in flight.
    opens_sockets: bool
    # A fresh engine per arm, in process: nothing is launched, booted or shared between runs.
    engine_per_arm: bool
    # boots_per_arm and the sentence a report prints where no server was launched.
    unbooted: tuple[int, str]
    open_backend: OpenBackend


CLOCKS = {
    ClockName.WALL: ClockKind(ClockName.WALL, opens_sockets=True, engine_per_arm=False,
                      unbooted=(0, "external server: loadgen restarted nothing"),
                      open_backend=open_wall_backend),
    ClockName.VIRTUAL: ClockKind(ClockName.VIRTUAL, opens_sockets=False, engine_per_arm=True,
                         unbooted=(1, "one fresh engine per arm on the virtual clock: exact, one "
                                      "is its floor"),
                         open_backend=_open_virtual_backend),
}  # fmt: skip


def clock_of(opts: RunOptions) -> ClockKind:
    """The clock the options chose."""
    return CLOCKS[opts.clock]


@asynccontextmanager
async def shared_target(
    scenario: Scenario,
    opts: RunOptions,
    root: Path,
    warn: Callable[[str], None],
    *,
    flags: dict[str, Any] | None = None,
    log_name: str = "boot",
) -> AsyncIterator[Target | None]:
    """One server for a series of runs into `root` (a capacity search's steps, a calibration's
    points): None where each run reaches its own (the URL, an engine per arm), else one boot of
    the launched server with `flags` over the scenario's, its log under root/log_name."""
    if opts.base_url or clock_of(opts).engine_per_arm or opts.replicas > 1:
        yield None
        return
    first = plan(scenario, run_seed=0).arms[0]
    if flags:
        first = dataclasses.replace(first, flags={**first.flags, **flags})
    async with launch_target(first, opts, log_dir=root / log_name, warn=warn) as target:
        yield target
