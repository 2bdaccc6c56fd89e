"""`loadgen probe-cache`: the sized warm pair, refused below 10 blocks, judged on the sim."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from loadgen.cli import main
from loadgen.engine.probe_cache import ProbeRefused, default_probe_tokens, probe_size

# The sim's default profile prefills slowly enough that a 2k-token prompt's TTFT halves when warm.
SIM = ["--server", "sim", "--server-arg=--profile=default"]


def test_default_probe_is_ten_blocks_and_at_least_2048_tokens() -> None:
    assert default_probe_tokens(16) == 2048  # 128 blocks
    assert default_probe_tokens(1696) == 16960  # 10 blocks of the seed's int4 geometry
    assert default_probe_tokens(300) == 3000
    assert default_probe_tokens(100) == 2100  # 21 whole blocks


def test_a_probe_below_ten_blocks_is_refused_with_the_reason() -> None:
    with pytest.raises(ProbeRefused, match=r"spans 9 blocks of 32 \(< 10\)"):
        probe_size(319, 32, "metrics")
    assert probe_size(320, 32, "metrics").tokens == 320


def test_an_unknown_block_size_is_refused() -> None:
    with pytest.raises(ProbeRefused, match=r"block size is unknown.*--block-size"):
        probe_size(4096, None, None)


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["probe-cache", *args])
    return result.exit_code, result.output


def test_healthy_sim_passes() -> None:
    code, out = cli(*SIM)
    assert code == 0, out
    assert out.startswith("cache healthy: probe 2048 tokens = 128 blocks of 16")
    assert "block size from server boot_log" in out
    assert "prefix-cache hits +" in out


def test_cache_dead_sim_fails() -> None:
    code, out = cli(*SIM, "--server-arg=--fault=cache_dead")
    assert code == 1, out
    assert out.startswith("cache DEAD:")
    assert "prefix-cache hits did not grow" in out


def test_small_probe_refused_before_sending() -> None:
    code, out = cli(*SIM, "--tokens", "100")
    assert code == 2
    assert "spans 6 blocks of 16 (< 10): too small to show reuse; use --tokens >= 160" in out


def test_base_url_and_server_together_is_a_usage_error() -> None:
    code, out = cli("--base-url", "http://127.0.0.1:9", *SIM)
    assert code == 2
    assert "not both" in out
