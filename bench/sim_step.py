"""Simulator overhead: microseconds of Python per engine step, with N requests decoding at once.

Runs the engine on virtual time (no modelled sleep is ever taken) and times `Engine.step()`
with time.perf_counter_ns over steps in which every request is decoding. Prints one line per
configuration; the ratios are the cost per request-step at the larger concurrency over the
smaller one's (below 1: a step's fixed cost is shared; above 1: the scheduler grows with N).

    .venv/bin/python bench/sim_step.py [--smoke] [--steps 300] [--concurrency 10 1000]
"""

from __future__ import annotations

import statistics
import time

from harness import parser, ratio, report

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
    ap = parser(__doc__)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--concurrency", type=int, nargs=2, default=[10, 1000], metavar=("LOW", "HIGH"))
    args = ap.parse_args()
    if args.smoke:
        args.steps, args.concurrency = 20, [10, 100]
    low, high = args.concurrency
    ratios = []
    for spec in (0, 3):
        per_request = {}
        for n in (low, high):
            median, p99 = step_overhead_us(n, args.steps, spec)
            per_request[n] = median / n
            print(
                f"concurrency {n:>5}  spec k={spec}:  {median:9.1f} us/step median "
                f"({p99:9.1f} p99), {median / n:6.2f} us per request-step"
            )
        compared = f"us per request-step, C={high} / C={low}, spec k={spec}"
        ratios.append(ratio(compared, per_request[high], per_request[low], "us", ".2f"))
    report(ratios, args.ratios)


if __name__ == "__main__":
    main()
