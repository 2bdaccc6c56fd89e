"""A closed-loop soak straight on the sim's engine core, on engine time (no HTTP, no client):
each finished request is replaced at once by the next, and each request's record is what a
perfect client would have seen (chunk times = step ends, tokens per chunk = tokens per step)."""

from __future__ import annotations

from collections.abc import Callable

from loadgen.records import StreamRecord
from loadgen.sim.engine import Engine, EngineConfig, SimRequest
from loadgen.sim.profiles import sim_profile
from loadgen.sim.tokenizer import SimTokenizer

NS = 1_000_000_000
TOK = SimTokenizer()
# (request index, engine time s) -> (prompt tokens, max tokens)
Sizer = Callable[[int, float], tuple[int, int]]


def engine_soak(
    duration_s: float,
    sizes: Sizer,
    *,
    drift_pct_per_h: float = 0.0,
    concurrency: int = 1,
    seed: int = 0,
    spec_tokens: int = 3,
    profile: str = "rtx4090-long",
) -> list[StreamRecord]:
    """Requests sent back to back until `duration_s` of engine time; records of those done."""
    engine = Engine(
        EngineConfig(
            max_num_seqs=max(concurrency, 1), num_gpu_blocks=16_384, profile=sim_profile(profile),
            num_speculative_tokens=spec_tokens, acceptance_rate=0.7, seed=seed,
            drift_per_hour=drift_pct_per_h / 100,
        )
    )  # fmt: skip
    count = 0

    def send(at: float) -> None:
        nonlocal count
        n, out = sizes(count, at)
        ids = TOK.generator(seed * 1_000_003 + count).take(n)
        engine.add_request(SimRequest(f"r{count}", ids, max_tokens=out, arrival_s=at))
        count += 1

    for _ in range(concurrency):
        send(0.0)
    while (step := engine.step()) is not None:
        for out in step.outputs:
            if out.finished and engine.now_s < duration_s:
                send(engine.now_s)
    return [_record(row) for row in engine.ground_truth() if row["finish_reason"] == "length"]


def _record(t: dict) -> StreamRecord:
    chunk_ns = [round(end * NS) for _, end, _ in t["tokens_per_step"]]
    chunk_tokens = [k for *_, k in t["tokens_per_step"]]
    return StreamRecord(
        id=t["request_id"], group="soak", rep=0, status="ok", error=None, api="completions",
        model="sim", prompt_tokens=t["num_prompt_tokens"],
        requested_prompt_tokens=t["num_prompt_tokens"],
        completion_tokens=t["completion_tokens"], cached_tokens=t["num_cached_tokens"],
        chunks=len(chunk_ns), events=len(chunk_ns), bytes=0, token_source="usage_continuous",
        finish_reason="length", http_status=200, t_intended_ns=round(t["arrival_s"] * NS),
        t_sent_ns=round(t["arrival_s"] * NS), t_headers_ns=round(t["arrival_s"] * NS),
        t_first_ns=chunk_ns[0], t_last_ns=chunk_ns[-1], t_done_ns=chunk_ns[-1],
        chunk_ns=chunk_ns, chunk_tokens=chunk_tokens,
    )  # fmt: skip
