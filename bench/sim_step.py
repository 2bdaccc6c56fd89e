"""Simulator overhead: microseconds of Python per engine step, with N requests decoding at once.

Runs the engine on virtual time (no modelled sleep is ever taken) and times `Engine.step()`
with time.perf_counter_ns over steps in which every request is decoding. Prints one line per
configuration.

    .venv/bin/python bench/sim_step.py [--steps 300]
"""

from __future__ import annotations

import argparse
import statistics
import time

from loadgen.sim.engine import Engine, EngineConfig, SimRequest
from loadgen.sim.tokenizer import SimTokenizer


def step_overhead_us(concurrency: int, steps: int, spec_tokens: int) -> tuple[float, float]:
    """(median, p99) microseconds per step with `concurrency` requests all decoding."""
    engine = Engine(
        EngineConfig(
            max_num_seqs=concurrency,
            max_num_batched_tokens=max(2048, concurrency * (1 + spec_tokens)),
            num_gpu_blocks=concurrency * 64,
            num_speculative_tokens=spec_tokens,
            acceptance_rate=0.7,
        )
    )
    tok = SimTokenizer()
    for i in range(concurrency):
        ids = tok.generator(i).take(128)
        engine.add_request(SimRequest(f"r{i}", ids, max_tokens=steps * (1 + spec_tokens) + 10))
    while (step := engine.step()) is not None and (
        engine.num_requests_waiting or step.num_prefill_tokens
    ):
        pass
    samples = []
    for _ in range(steps):
        t0 = time.perf_counter_ns()
        engine.step()
        samples.append((time.perf_counter_ns() - t0) / 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    for spec in (0, 3):
        for n in (10, 1000):
            median, p99 = step_overhead_us(n, args.steps, spec)
            print(
                f"concurrency {n:>5}  spec k={spec}:  {median:9.1f} us/step median "
                f"({p99:9.1f} p99), {median / n:6.2f} us per request-step"
            )


if __name__ == "__main__":
    main()
