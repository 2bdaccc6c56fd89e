"""The Ray backend's parts that need no cluster: clock offsets, and `--ray` without Ray."""

from __future__ import annotations

import subprocess
import sys

from loadgen.client.ray_pool import _host_port, cluster_workers, min_rtt_offset

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
