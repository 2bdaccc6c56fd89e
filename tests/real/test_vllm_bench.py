"""loadgen against vLLM's own benchmark client, `vllm bench serve`, on one vLLM boot: the same
uniform closed loop (16 requests of 256 prompt and 128 output tokens, ignore_eos, at most 4 in
flight), measured by each tool in turn, six rounds each in the order bench, loadgen, loadgen,
bench, bench, ...: a drift of the server over the test falls on both tools alike. The same
rounds' bench runs also stand beside `loadgen bench serve` (the second test, below): one
bench run is ~35 s of vLLM's import on two cores, and one sequence serves both tests.

Like for like: vllm bench's output_throughput is total output tokens / its benchmark duration
(from just before its first request to the end of its last); loadgen's is the measured streams'
completion tokens (from usage) / the run's wall_s (earliest intended send to the latest end).
Both TTFTs run from just before a request is posted to its first streamed token. The prompts
differ in text (random token ids vs loadgen's prose), not in size, which is what the tiny
model's prefill and decode cost depends on.

The referee is the server's own account of the same requests: the deltas of vLLM's
time_to_first_token_seconds and e2e_request_latency_seconds histograms over each tool's run.
Two runs of this workload differ by more than 5% on the server itself (its mean TTFT moved
19 -> 26 ms between identical runs: which prefills share an engine step is luck), so the raw
numbers of two runs cannot agree within 5% however exact the clients. What must agree within
5% is each tool's figure relative to the server's figure for that tool's own requests: that is
the part a client can get wrong (for TTFT, the time it adds to the server's, in ms).

Output throughput: the client/server ratios agree within 1-2%, round by round. TTFT: both
clients see a first token later than the server's own TTFT (the HTTP and API-server path); at 1
in flight that gap is the same for both (bench 2.1-2.3 ms, loadgen 1.6-2.2 ms), at 4 in flight
bench's grows to 3.5-5.8 ms. The likely cause, from bench's source
(benchmarks/lib/endpoint_request_func.py): it reads the clock only after json-parsing the
event, in a Python loop that also parses the other three streams' events, while loadgen stamps
the bytes as they arrive. So the test holds loadgen's mean TTFT in every round above the
server's (a lower bound) and the time loadgen adds beyond bench's, the median over rounds of
(loadgen's added time - bench's in the same round), below bench's own spread between rounds.

Why rounds, and why bench's spread: on a 2-core machine the vLLM engine, its API server and
the client share the cores, and one run's added time moves with the scheduler's luck. One CI
run measured loadgen adding 5.98 ms against bench's 5.69 with a single run each; on this
machine, two tests of four rounds measured bench 5.65/5.35/5.20/5.45 and 6.26/5.07/4.30/5.31 ms
against loadgen 6.47/4.47/3.20/3.44 and 3.41/7.10/2.96/2.63 ms, loadgen's 7.10 ms round with
its own event loop late by 10-14 ms (loop_lag_ttft_ns) inside twelve of its streams' TTFTs.
A client cannot be held to a finer line than the referee's own run-to-run noise, and a median
of paired rounds is not moved by one round the scheduler starved. Before the first round, one
throw-away loadgen run of the same workload: the boot's first heavy load falls on neither tool.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadgen.analysis.summary import analyze_run
from loadgen.records import read_streams
from loadgen.server import installs
from loadgen.server.launcher import Server
from loadgen.server.vllm import _LAUNCH, VllmProfile

from support.paths import DATA
from support.real import PLAIN_BOOT, note, run_on

pytestmark = pytest.mark.real
SHARED_BOOT = PLAIN_BOOT

SCENARIO = DATA / "scenarios" / "real_bench.yaml"
PROMPTS, CONCURRENCY, INPUT_LEN, OUTPUT_LEN = 16, 4, 256, 128
AGREEMENT = 0.05
BENCH_TIMEOUT_S = 300
ROUNDS = 6
# The first SIDE_ROUNDS rounds also run `loadgen bench serve` (the second test).
SIDE_ROUNDS = 4
COUNTERS = ("vllm:prompt_tokens", "vllm:generation_tokens", "vllm:request_success")
# The throw-away run's seed: its salts must match no measured round's.
WARM_SEED = 99
TTFT, E2E = "vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds"


@dataclass(frozen=True)
class Measured:
    """One tool's figures for its run, and the server's for the same requests."""

    ttft_ms: float
    tok_s: float
    server_requests: int
    server_ttft_ms: float
    # The closed loop's rate as the server saw it: CONCURRENCY x tokens / sum of e2e latencies.
    server_tok_s: float

    @property
    def ttft_added_ms(self) -> float:
        """What the client's TTFT adds to the server's own for the same requests: the HTTP
        path and the client's stamping, a time, not a share of a TTFT that queueing sets."""
        return self.ttft_ms - self.server_ttft_ms

    @property
    def tok_s_ratio(self) -> float:
        return self.tok_s / self.server_tok_s

    def line(self) -> str:
        return (
            f"TTFT {self.ttft_ms:.1f} ms (server {self.server_ttft_ms:.1f}), output "
            f"{self.tok_s:.0f} tok/s (server {self.server_tok_s:.0f})"
        )


def server_counts(server: Server) -> dict[str, float]:
    """The request, prompt and generation counters (summed over labels) and the TTFT and e2e
    histograms' sum and count."""
    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, float] = dict.fromkeys(COUNTERS, 0.0)
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if fam.name in COUNTERS and s.name == fam.name + "_total":
                out[fam.name] += s.value
            elif fam.name in (TTFT, E2E) and s.name.endswith(("_sum", "_count")):
                out[s.name] = s.value
    return out


def deltas(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before.get(k, 0.0) for k in after}


def measured(ttft_ms: float, tok_s: float, server: dict[str, float]) -> Measured:
    """A tool's figures beside the server's for the same requests (`server`: the deltas of
    server_counts over the tool's run)."""
    n = int(server[f"{TTFT}_count"])
    return Measured(
        ttft_ms=ttft_ms,
        tok_s=tok_s,
        server_requests=n,
        server_ttft_ms=1e3 * server[f"{TTFT}_sum"] / n,
        server_tok_s=CONCURRENCY * PROMPTS * OUTPUT_LEN / server[f"{E2E}_sum"],
    )


def bench_flags(server: Server, result_dir: Path, seed: int) -> list[str]:
    """The flags of one `vllm bench serve` run of the workload (the module docstring's)."""
    return [
        "--backend", "vllm", "--base-url", server.url, "--model", server.model,
        "--tokenizer", str(installs.tiny_model_dir()),
        "--dataset-name", "random", "--random-input-len", str(INPUT_LEN),
        "--random-output-len", str(OUTPUT_LEN), "--num-prompts", str(PROMPTS),
        "--max-concurrency", str(CONCURRENCY), "--ignore-eos", "--disable-tqdm",
        "--seed", str(seed),
        "--save-result", "--result-dir", str(result_dir), "--result-filename", "bench.json",
    ]  # fmt: skip


def vllm_bench_serve(server: Server, result_dir: Path, seed: int) -> dict[str, Any]:
    """Runs `vllm bench serve` from the vLLM venv against the server; its result JSON. The
    seed draws the random prompts: a second run on one boot needs its own, or it hits the
    prefix cache."""
    argv = [str(installs.vllm_python()), "-c", _LAUNCH, "bench", "serve",
            *bench_flags(server, result_dir, seed)]  # fmt: skip
    env = {**os.environ, **VllmProfile().env(installs.state_dir("vllm"))}
    proc = subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=BENCH_TIMEOUT_S, check=False
    )
    (result_dir / "bench.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, f"vllm bench serve failed:\n{(proc.stdout + proc.stderr)[-3000:]}"
    return orjson.loads((result_dir / "bench.json").read_bytes())


def read_like_a_bench_script(path: Path) -> dict[str, float]:
    """What a script written for bench's result file reads from it (the fields its summary
    prints), typed as bench writes them."""
    result = json.loads(path.read_text())
    assert isinstance(result["completed"], int) and isinstance(result["total_input_tokens"], int)
    return {
        key: float(result[key])
        for key in ("completed", "failed", "total_input_tokens", "total_output_tokens",
                    "duration", "request_throughput", "output_throughput",
                    "total_token_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
                    "mean_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "p99_itl_ms")
    }  # fmt: skip


@dataclass(frozen=True)
class SideRun:
    """One tool's run of the command: what its result file says, and the server's deltas."""

    result: dict[str, Any]
    read: dict[str, float]
    server: dict[str, float]

    @property
    def ttft_added_ms(self) -> float:
        server_ms = 1e3 * self.server[f"{TTFT}_sum"] / self.server[f"{TTFT}_count"]
        return self.result["mean_ttft_ms"] - server_ms


def run_vllm_bench(server: Server, result_dir: Path, seed: int) -> SideRun:
    result_dir.mkdir(parents=True)
    before = server_counts(server)
    bench = vllm_bench_serve(server, result_dir, seed)
    after = server_counts(server)
    assert bench["completed"] == PROMPTS
    assert bench["total_output_tokens"] == PROMPTS * OUTPUT_LEN
    return SideRun(
        bench, read_like_a_bench_script(result_dir / "bench.json"), deltas(before, after)
    )


async def run_loadgen(server: Server, out: Path, seed: int) -> Measured:
    before = server_counts(server)
    run_dir = await run_on(server, SCENARIO, out, run_seed=seed)
    after = server_counts(server)
    records = [r for r in read_streams(run_dir) if r.phase == "measure"]
    assert len(records) == PROMPTS
    assert all(r.status == "ok" and r.completion_tokens == OUTPUT_LEN for r in records)
    assert all(r.prompt_tokens == INPUT_LEN for r in records)
    summary = analyze_run(run_dir).summary
    ttfts = [s["ttft_s"] for s in summary["streams"] if s["phase"] == "measure"]
    tok_s = sum(r.completion_tokens for r in records) / summary["run"]["wall_s"]
    return measured(1e3 * sum(ttfts) / len(ttfts), tok_s, deltas(before, after))


def relative_difference(a: float, b: float) -> float:
    return abs(a - b) / b


def bench_measured(run: SideRun) -> Measured:
    """Bench's own figures for its run beside the server's."""
    return measured(run.result["mean_ttft_ms"], run.result["output_throughput"], run.server)


@dataclass(frozen=True)
class Rounds:
    """Each tool's runs of the workload on the module's boot, one a round."""

    benches: list[SideRun]  # vllm bench serve
    ours: list[Measured]  # loadgen's run_plan
    sides: list[SideRun]  # `loadgen bench serve`, the first SIDE_ROUNDS rounds


@pytest.fixture(scope="module")
def rounds(vllm: Server, tmp_path_factory: pytest.TempPathFactory) -> Rounds:
    """After one throw-away loadgen run (the boot's first heavy load falls on no measured
    round), round i runs `loadgen bench serve`, bench, loadgen, and odd rounds the other way
    round: bench sits next to each of loadgen's two tools, and each pair runs bench, loadgen,
    loadgen, bench, ...: a drift of the server over the test (a warming cache, a busier
    machine) falls on both tools of a pair alike. Seeds of their own: no run's prompts may hit
    another's in the prefix cache."""
    out = tmp_path_factory.mktemp("rounds")
    asyncio.run(run_loadgen(vllm, out / "warm", seed=WARM_SEED))
    benches: list[SideRun] = []
    ours: list[Measured] = []
    sides: list[SideRun] = []
    for i in range(ROUNDS):
        side = i < SIDE_ROUNDS
        if i % 2 == 0:
            if side:
                sides.append(loadgen_bench_serve(vllm, out / f"lg{i}", seed=100 + i))
            benches.append(run_vllm_bench(vllm, out / f"bench{i}", seed=i))
            ours.append(asyncio.run(run_loadgen(vllm, out / f"loadgen{i}", seed=i)))
        else:
            ours.append(asyncio.run(run_loadgen(vllm, out / f"loadgen{i}", seed=i)))
            benches.append(run_vllm_bench(vllm, out / f"bench{i}", seed=i))
            if side:
                sides.append(loadgen_bench_serve(vllm, out / f"lg{i}", seed=100 + i))
    return Rounds(benches, ours, sides)


def test_loadgen_agrees_with_vllm_bench_serve(rounds: Rounds) -> None:
    benches = [bench_measured(b) for b in rounds.benches]
    ours = rounds.ours
    for i, (bench, our) in enumerate(zip(benches, ours, strict=True)):
        note(f"vllm bench serve (16 x 256/128, 4 in flight), round {i}", bench.line())
        note(f"loadgen, the same closed loop, round {i}", our.line())
        note(
            f"client / server ratios (bench vs loadgen), round {i}",
            f"TTFT added {bench.ttft_added_ms:.2f} vs {our.ttft_added_ms:.2f} ms; "
            f"output tok/s {bench.tok_s_ratio:.3f} vs {our.tok_s_ratio:.3f}",
        )
        # The server counted exactly each tool's requests, so the ratios compare like with like.
        assert bench.server_requests == our.server_requests == PROMPTS
        assert relative_difference(our.tok_s_ratio, bench.tok_s_ratio) < AGREEMENT
        # A client's TTFT cannot beat the server's own.
        assert our.ttft_added_ms > 0.0
    # In time, not as a ratio: the runs' server TTFTs differ by queueing luck (58 vs 28 ms in
    # one CI run), and a ratio over the smaller one failed loadgen for adding 3.8 ms where bench
    # added 4.6 ms.
    bench_added = [b.ttft_added_ms for b in benches]
    paired = zip(ours, benches, strict=True)
    beyond = statistics.median(o.ttft_added_ms - b.ttft_added_ms for o, b in paired)
    bench_spread = max(bench_added) - min(bench_added)
    note(
        "TTFT loadgen adds beyond bench, median over paired rounds",
        f"{beyond:+.2f} ms; bench's spread between rounds {bench_spread:.2f} ms",
    )
    assert beyond < bench_spread


# --- `loadgen bench serve`: the same flags, side by side ------------------------------------
#
# The same `vllm bench serve` command line, run by vLLM's bench and by `loadgen bench serve`
# in turn on this module's boot (the rounds above: loadgen, bench, bench, loadgen): each must
# send the same requests by the server's own counters (requests, prompt and generation tokens),
# loadgen's TTFT must add no more to the server's than bench's does beyond bench's own spread
# between rounds, and a script written for bench's result file must read loadgen's.
def loadgen_bench_serve(server: Server, out: Path, seed: int) -> SideRun:
    """`loadgen bench serve` with bench's flags, as a user would type it."""
    out.mkdir(parents=True)
    before = server_counts(server)
    argv = [sys.executable, "-m", "loadgen", "bench", "serve",
            *bench_flags(server, out, seed), "--out", str(out / "runs")]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=BENCH_TIMEOUT_S,
                          check=False)  # fmt: skip
    (out / "loadgen.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, f"loadgen bench serve failed:\n{proc.stderr[-3000:]}"
    after = server_counts(server)
    result = orjson.loads((out / "bench.json").read_bytes())
    return SideRun(result, read_like_a_bench_script(out / "bench.json"), deltas(before, after))


def test_loadgen_bench_serve_runs_benchs_command_alike(rounds: Rounds) -> None:
    benches = rounds.benches[:SIDE_ROUNDS]
    ours = rounds.sides
    for i, (bench, our) in enumerate(zip(benches, ours, strict=True)):
        note(
            f"bench serve side by side, round {i} (server counters: prompt, output tokens, "
            "requests)",
            f"bench {[int(bench.server[c]) for c in COUNTERS]} TTFT added "
            f"{bench.ttft_added_ms:.2f} ms; loadgen {[int(our.server[c]) for c in COUNTERS]} "
            f"TTFT added {our.ttft_added_ms:.2f} ms",
        )
        # The same requests by the server's own account.
        assert bench.server["vllm:request_success"] == our.server["vllm:request_success"]
        assert our.server["vllm:request_success"] == PROMPTS
        # Prompt tokens: loadgen's exactly as asked; bench's as its own result file counts
        # them, which re-encoding its random token ids can leave a token or two off the ask
        # (one CI round: 4097 for 16 x 256), so the two tools agree within bench's own miss.
        assert our.server["vllm:prompt_tokens"] == PROMPTS * INPUT_LEN
        assert bench.server["vllm:prompt_tokens"] == bench.result["total_input_tokens"]
        assert our.server["vllm:prompt_tokens"] == our.result["total_input_tokens"]
        bench_miss = abs(bench.result["total_input_tokens"] - PROMPTS * INPUT_LEN)
        assert abs(bench.server["vllm:prompt_tokens"] - our.server["vllm:prompt_tokens"]) == (
            bench_miss
        )
        assert bench.server["vllm:generation_tokens"] == our.server["vllm:generation_tokens"]
        assert our.server["vllm:generation_tokens"] == PROMPTS * OUTPUT_LEN
        # Both files read by one script, and loadgen's has every field bench's has, in order.
        assert list(our.result) == [k for k in bench.result if k in our.result]
        assert set(bench.result) <= set(our.result) | {"date"}
        assert our.read["completed"] == bench.read["completed"] == PROMPTS
        assert our.read["total_output_tokens"] == bench.read["total_output_tokens"]
        assert our.ttft_added_ms > 0.0
    bench_added = [b.ttft_added_ms for b in benches]
    paired = zip(ours, benches, strict=True)
    beyond = statistics.median(o.ttft_added_ms - b.ttft_added_ms for o, b in paired)
    spread = max(bench_added) - min(bench_added)
    note("bench serve side by side: TTFT loadgen adds beyond bench, median of rounds",
         f"{beyond:+.2f} ms; bench's spread {spread:.2f} ms")  # fmt: skip
    assert beyond < spread
