"""Prints what the real-server tests measured (boot times, TTFT, decode rates) at the end of
the run, so CI logs carry the numbers; holds the boots modules share, and runs the modules
that share one in a row."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from loadgen.server.launcher import Server

from support.real import NUMBERS, SharedBoots


@pytest.fixture(scope="session")
def boots(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedBoots]:
    shared = SharedBoots(tmp_path_factory)
    try:
        yield shared
    finally:
        shared.close()


@pytest.fixture(scope="module", autouse=True)
def shared_boot_down(boots: SharedBoots, request: pytest.FixtureRequest) -> None:
    """A module without a `SHARED_BOOT` runs with none of the shared servers up."""
    if not hasattr(request.module, "SHARED_BOOT"):
        boots.close()


@pytest.fixture(scope="module")
def vllm(boots: SharedBoots, request: pytest.FixtureRequest) -> Server:
    """The module's `SHARED_BOOT` server (a module that boots its own defines its own)."""
    return boots.servers(*request.module.SHARED_BOOT)[0]


def boot_key(item: pytest.Item) -> object:
    """The module's `SHARED_BOOT` (profile, flags), or the module itself when it has none."""
    module = getattr(item, "module", None)
    return getattr(module, "SHARED_BOOT", module)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules with the same `SHARED_BOOT` run in a row, in the place of the first of them;
    every other module keeps its place."""
    first: dict[object, int] = {}
    for i, item in enumerate(items):
        first.setdefault(boot_key(item), i)
    items.sort(key=lambda item: first[boot_key(item)])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if NUMBERS:
        terminalreporter.section("real-server numbers")
        for name, value in NUMBERS:
            terminalreporter.write_line(f"{name}: {value}")
