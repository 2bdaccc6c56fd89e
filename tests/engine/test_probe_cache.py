"""`loadgen probe-cache`: sized from the server's TTFT floor, refused below 10 blocks or above
its limits, judged on the sim by its counters (TTFT as witness), answers compared."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from click.testing import CliRunner

from loadgen.cli import main
from loadgen.engine.probe_cache import (
    ProbeRefused,
    ProbeSize,
    default_probe_tokens,
    grow_probe,
    next_probe_tokens,
    probe_size,
)
from loadgen.server.launcher import free_port

# A sim whose fixed per-request cost (50 ms) dwarfs its prefill (tiny profile: 8k tokens in
# ~25 ms): the TTFT ratio is noise there, as on an H200, and the counters must decide.
FLOORED = ["--server", "sim", "--server-arg=--request-overhead-s=0.05"]
SIM = ["--server", "sim", "--server-arg=--profile=default"]


def test_default_probe_starts_at_ten_blocks_and_at_least_2048_tokens() -> None:
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


def test_the_model_window_bounds_the_probe() -> None:
    size = probe_size(None, 16, "metrics", window=8192)
    assert (size.tokens, size.limit, size.fixed) == (2048, 8160, False)  # 8192 - tail - answer
    with pytest.raises(ProbeRefused, match=r"--tokens 9000 exceeds the longest probe of 8160"):
        probe_size(9000, 16, "metrics", window=8192)
    with pytest.raises(ProbeRefused, match=r"block size 1024 \(metrics\) x 10 blocks exceeds"):
        probe_size(None, 1024, "metrics", window=8192)


def test_the_probe_grows_with_the_measured_prefill_until_far_above_the_floor() -> None:
    size = ProbeSize(2048, 16, "sim", limit=131_072)
    # The H200: a 15 ms floor, 2048 tokens cold in 94 ms; 20 x 15 ms = 300 ms is the goal.
    # 1.25 x (300 - 15) / (94 - 15) = 4.51x: 9235 tokens, up to whole blocks.
    assert next_probe_tokens(2048, 0.094, 0.015, size) == 9248
    assert next_probe_tokens(9248, 0.40, 0.015, size) is None  # 0.40 s >= 0.30 s: enough
    # Never more than 8x a step, never past the limit.
    assert next_probe_tokens(2048, 0.0151, 0.015, size) == 16384
    assert next_probe_tokens(2048, 0.0151, 0.015, ProbeSize(2048, 16, "sim", limit=4096)) == 4096
    assert next_probe_tokens(4096, 0.0151, 0.015, ProbeSize(4096, 16, "sim", limit=4096)) is None


async def test_grow_probe_stops_at_the_first_size_far_enough_above_the_floor() -> None:
    tried: list[int] = []

    async def cold_ttft(tokens: int) -> float:
        tried.append(tokens)
        return 0.015 + tokens * 40e-9  # the floor plus 40 ns a token of prefill

    assert await grow_probe(ProbeSize(2048, 16, "sim"), 0.015, cold_ttft) == 131_072
    assert tried == [2048, 16384, 131_072]  # 8x, 8x, then the limit
    tried.clear()
    assert await grow_probe(ProbeSize(2048, 16, "sim", fixed=True), 0.015, cold_ttft) == 2048
    assert tried == []  # --tokens: no sizing sends


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["probe-cache", *args])
    return result.exit_code, result.output


def probed(out: str) -> tuple[int, int]:
    """(probe tokens, hits) from the line; the size follows the measured floor, so a test
    reads it rather than pins it (a stalled machine may stop the growth early)."""
    m = re.search(r"probe (\d+) tokens = .*prefix-cache hits \+(\d+) tokens", out)
    assert m, out
    return int(m[1]), int(m[2])


def test_a_floored_sim_whose_cache_hits_is_healthy_by_its_counters() -> None:
    code, out = cli(*FLOORED)
    assert code == 0, out
    tokens, hits = probed(out)
    # 20 x the 50 ms floor is out of this sim's reach: the probe grows to the window (8160).
    assert out.startswith("cache healthy: probe ") and 2048 <= tokens <= 8160
    assert hits == tokens
    assert (
        f"decided by counters: prefix-cache hits +{hits} tokens (>= {tokens - 16} reusable)" in out
    )
    assert re.search(r"; warm answer = cold \(\d+ chars, greedy\)$", out.rstrip())


def test_a_floored_sim_with_cache_dead_is_dead_and_names_both_witnesses() -> None:
    code, out = cli(*FLOORED, "--server-arg=--fault=cache_dead")
    assert code == 1, out
    tokens, hits = probed(out)
    assert out.startswith("cache DEAD: probe ") and hits == 0
    assert f"hits +0 tokens (< {tokens - 16} reusable); TTFT: warm TTFT" in out
    assert "warm answer" not in out


def test_a_fast_sim_is_healthy_by_its_counters_with_ttft_as_witness() -> None:
    code, out = cli(*SIM)
    assert code == 0, out
    assert "block size from server boot_log" in out
    assert "decided by counters: prefix-cache hits +" in out and "; TTFT: warm TTFT" in out


def test_a_block_size_the_server_contradicts_is_refused_and_one_it_agrees_with_taken() -> None:
    # --block-size is for a server that does not say; it overrode one that said 16.
    code, out = cli(*SIM, "--block-size", "8")
    assert (code, out) == (2, "cache probe refused: --block-size 8, but the server says 16 "
                              "(server boot_log); drop --block-size, which is for a server that "
                              "does not say\n")  # fmt: skip
    code, out = cli(*SIM, "--block-size", "16")
    assert code == 0 and "block size from server boot_log" in out, out


def test_warm_answers_that_differ_are_a_correctness_failure() -> None:
    code, out = cli(*SIM, "--server-arg=--fault=warm_mismatch=1")
    assert code == 3, out
    assert out.startswith("cache WRONG ANSWERS:")
    assert "CACHE CORRECTNESS FAILURE: warm answer" in out


def test_small_probe_refused_before_sending() -> None:
    code, out = cli(*SIM, "--tokens", "100")
    assert code == 2
    assert "spans 6 blocks of 16 (< 10): too small to show reuse; use --tokens >= 160" in out


@pytest.mark.parametrize(
    ("flag", "value", "line"),
    [
        ("--tokens", "1000000000", "--tokens 1000000000 is above the limit of 131072"),
        ("--block-size", "100000000", "--block-size 100000000 is above the limit of 13107"),
    ],
)
def test_absurd_sizes_are_refused_in_one_line_before_connecting(
    flag: str, value: str, line: str
) -> None:
    code, out = cli("--base-url", "http://127.0.0.1:9", flag, value)
    assert (code, out) == (2, f"cache probe refused: {line}" + (
        " (10 blocks must fit 131072 tokens)\n" if flag == "--block-size" else "\n"))  # fmt: skip


def test_nothing_listening_says_cannot_connect() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    code, out = cli("--base-url", url)
    assert code == 1
    assert out.startswith(f"Error: cannot connect to {url}")
    assert "block size" not in out and len(out.strip().splitlines()) == 1


@pytest.fixture
def no_models() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"object": "list", "data": []}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join(timeout=5)


def test_a_server_that_lists_no_models_is_refused_in_one_line(no_models: str) -> None:
    code, out = cli("--base-url", no_models, "--block-size", "16")
    assert (code, out) == (
        2, f"cache probe refused: {no_models}/v1/models lists no models; pass --model\n"
    )  # fmt: skip


def test_base_url_and_server_together_is_a_usage_error() -> None:
    code, out = cli("--base-url", "http://127.0.0.1:9", *SIM)
    assert code == 2
    assert "not both" in out
