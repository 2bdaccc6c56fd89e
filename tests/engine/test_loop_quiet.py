"""Nothing heavy runs on the loop that times the streams while any is in flight: a wall-clock
capacity search against the launched sim (as `loadgen capacity` runs it) is watched by an
audit hook and a counting exposition parser, a deterministic check where a lag threshold on a
busy 2-core machine would not be."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadgen import exposition
from loadgen.analysis.capacity import Search
from loadgen.analysis.slo import parse_slo
from loadgen.client.openai import OpenAIClient
from loadgen.engine.capacity import search_capacity
from loadgen.engine.options import RunOptions
from loadgen.engine.run import Hooks
from loadgen.scenario.load import load_scenario
from loadgen.scenario.load_axis import LoadAxis

# What the hook records, while a test watches; the hook itself cannot be removed.
_WATCH: list[Callable[[str, tuple[Any, ...]], None]] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    for watch in _WATCH:
        watch(event, args)


sys.addaudithook(_audit)


class InFlight:
    """Counts the client's streams in flight on the loop's thread, and what happened there
    while any was: modules imported, files opened, exposition lines parsed beyond the wanted."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.streams = 0
        self.streamed = 0
        self.thread = threading.get_ident()
        self.seen: list[str] = []
        stream = OpenAIClient.stream

        async def counted(client: OpenAIClient, req: Any) -> Any:
            self.streams += 1
            self.streamed += 1
            try:
                return await stream(client, req)
            finally:
                self.streams -= 1

        def parse(text: str) -> Any:
            extra = text.count("\n") - exposition.wanted_lines(text).count("\n")
            if extra and self._busy():
                self.seen.append(f"parse of {extra} exposition lines loadgen does not read")
            return text_string_to_metric_families(text)

        monkeypatch.setattr(OpenAIClient, "stream", counted)
        monkeypatch.setattr(exposition, "text_string_to_metric_families", parse)

    def _busy(self) -> bool:
        return self.streams > 0 and threading.get_ident() == self.thread

    def audit(self, event: str, args: tuple[Any, ...]) -> None:
        if event in ("import", "open") and self._busy():
            self.seen.append(f"{event} {args[0]}")


async def test_a_capacity_search_does_no_heavy_work_while_streams_are_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    watch = InFlight(monkeypatch)
    scenario = load_scenario("capacity_seats", ["groups.users.max_tokens=16"])
    axis = LoadAxis("concurrency", None, 6)
    opts = RunOptions(out_root=tmp_path, progress=False, run_seed=3)
    _WATCH.append(watch.audit)
    try:
        root = await search_capacity(
            scenario, axis, Search("concurrency", 1, 2, 1, 0.05, 2),
            parse_slo("ttft_p90=5"), opts, Hooks(warn=lambda _m: None),
        )  # fmt: skip
    finally:
        _WATCH.remove(watch.audit)
    # The check saw the streams it watches: both steps' warm-ups and measured streams.
    assert sorted(p.name for p in (root / "steps").iterdir()) == [
        "01-concurrency=1", "02-concurrency=2"
    ]  # fmt: skip
    assert watch.streamed >= 12 and watch.streams == 0
    assert watch.seen == []


def test_the_watch_sees_an_import_and_an_open_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check fires when it must: the same events with a stream in flight are reported, and
    none without one."""
    watch = InFlight(monkeypatch)
    _WATCH.append(watch.audit)
    try:
        sys.modules.pop("wave", None)
        __import__("wave")
        watch.streams = 1
        sys.modules.pop("wave", None)
        __import__("wave")
        with open(__file__, "rb"):
            pass
        exposition.text_string_to_metric_families(
            "# TYPE x gauge\nx 1\nvllm:num_requests_running 2\n"
        )
    finally:
        _WATCH.remove(watch.audit)
    # Importing opens the module's files too; nothing was seen before the stream.
    assert watch.seen[0] == "import wave" and f"open {__file__}" in watch.seen
    assert watch.seen[-1] == "parse of 2 exposition lines loadgen does not read"
