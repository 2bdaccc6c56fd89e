"""The Ray backend's parts that need no cluster: clock offsets, an actor's replies, and
`--ray` without Ray."""

from __future__ import annotations

import queue
import subprocess
import sys
import types

import pytest

from loadgen.client import ray_pool
from loadgen.client.ray_pool import GATHER_S, _gathered, _host_port, cluster_workers, min_rtt_offset

from support.cli import assert_one_line_error


def test_offset_comes_from_the_least_rtt_round_trip() -> None:
    # (t_send, t_remote, t_recv): the second sample's 10 ns RTT bounds the remote clock best.
    samples = [(0, 1_000, 400), (1_000, 6_005, 1_010), (2_000, 7_100, 2_300)]
    assert min_rtt_offset(samples) == (5_000, 10)


def test_ray_option_without_ray_installed_fails_in_one_line() -> None:
    # sys.modules["ray"] = None makes `import ray` raise ImportError, as if it were absent.
    code = "import sys; sys.modules['ray'] = None; from loadgen.cli import main; main()"
    proc = subprocess.run(
        [sys.executable, "-c", code, "request", "--base-url", "http://127.0.0.1:9",
         "--ray", "auto", "--workers", "2"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    line = assert_one_line_error(proc)
    assert "pip install 'loadgen[ray]'" in line


def test_host_port_of_the_addresses_ray_takes() -> None:
    assert _host_port("10.0.0.5:6379") == ("10.0.0.5", 6379)
    assert _host_port("ray://head.example:10001") == ("head.example", 10001)
    assert _host_port("[::1]:6379") == ("::1", 6379)
    assert _host_port("auto") is None and _host_port("local") is None


def test_auto_ray_workers_one_per_node_more_for_many_streams_at_most_one_per_cpu() -> None:
    assert cluster_workers(nodes=3, cpus=24, peak_in_flight=8) == 3
    assert cluster_workers(nodes=2, cpus=24, peak_in_flight=1_500) == 6  # 256 streams each
    assert cluster_workers(nodes=1, cpus=2, peak_in_flight=1_500) == 2
    assert cluster_workers(nodes=4, cpus=0, peak_in_flight=8) == 1


class _Arrivals:
    """A queue whose items arrive at set times on a clock of its own (the test's, not the
    host's): get waits for the next one, up to its timeout."""

    def __init__(self, arrivals: list[tuple[float, object]]) -> None:
        self.now = 0.0
        self._arrivals = arrivals

    def get(self, timeout: float | None = None) -> object:
        at = self._arrivals[0][0]
        if timeout is not None and at > self.now + timeout:
            self.now += timeout
            raise queue.Empty
        self.now = max(self.now, at)
        return self._arrivals.pop(0)[1]

    def get_nowait(self) -> object:
        return self.get(0.0)


def test_an_actor_gathers_the_records_of_a_window_into_one_reply(monkeypatch) -> None:
    # Records at 1.0 s, 1 ms and GATHER_S - 1 us later: one reply; then one past the window
    # (it waits for the next reply); then the job's end, which ends the reply it comes in.
    g = GATHER_S
    q = _Arrivals([(1.0, "a"), (1.001, "b"), (1.0 + g - 1e-6, "c"), (1.0 + g + 1e-3, "d"),
                   (1.0 + g + 2e-3, None)])  # fmt: skip
    monkeypatch.setattr(ray_pool, "time", types.SimpleNamespace(monotonic=lambda: q.now))
    assert list(_gathered(q)) == ["a", "b", "c"]
    assert q.now == pytest.approx(1.0 + g)  # it waited out the window, no longer
    assert list(_gathered(q)) == ["d", None]
