"""How late the wall-clock sim's runner delivers step outputs while the server tokenizes whales.

    nice .venv/bin/python bench/sim_tokenize_lateness.py [--smoke] [--rounds R] [--seconds S]
                                                         [--slice-chars N]

Three minnows decode on 5 ms steps (the runner sleeping to each step's absolute deadline) while
a 72.6k-token prompt is tokenized every 100 ms, the way the server could do it:
- none:     no tokenizing (the reference: timer and scheduling lateness alone);
- blocking: tok.encode on the event loop (the server before it sliced);
- thread:   asyncio.to_thread(tok.encode) with sys.setswitchinterval(0.5 ms), so the loop
            thread asks for the GIL back every 0.5 ms (a regex findall holds it throughout);
- slices:   tok.encode_slices with a yield to the loop between parts (the server now).
Lateness is when the runner woke minus its step's deadline, per step. Modes alternate within
each round so machine load hits them alike; the figures are only as quiet as the machine. The
ratios are each mode's p99 lateness over none's.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

from harness import parser, ratio, report

from loadgen.clock import WallClock
from loadgen.sim.engine import Engine, EngineConfig, SimRequest
from loadgen.sim.profiles import StepProfile
from loadgen.sim.runner import SimRunner
from loadgen.sim.server import TOKENIZE_SLICE_CHARS
from loadgen.sim.tokenizer import SimTokenizer

STEP_5MS = StepProfile("flat-5ms", fixed_s=0.005, per_token_s=0.0, decode_ctx_s=0.0,
                       prefill_ctx_s=0.0)  # fmt: skip
WHALE_TOKENS = 72_600


class LatenessClock(WallClock):
    """The runner's default clock (perf_counter_ns, real sleeps), noting how late each sleep
    returned."""

    def __init__(self) -> None:
        super().__init__()
        self.late_ms: list[float] = []

    async def sleep_until(self, t_ns: int) -> None:
        await super().sleep_until(t_ns)
        self.late_ms.append((self.now_ns() - t_ns) / 1e6)


async def tokenize(mode: str, tok: SimTokenizer, text: str, slice_chars: int) -> int:
    if mode == "blocking":
        return len(tok.encode(text))
    if mode == "thread":
        return len(await asyncio.to_thread(tok.encode, text))
    ids: list[int] = []
    for part in tok.encode_slices(text, slice_chars):
        ids.extend(part)
        await asyncio.sleep(0)
    return len(ids)


async def one(mode: str, seconds: float, text: str, slice_chars: int) -> tuple[list[float], float]:
    """Per-step lateness (ms) and the mean tokenize time (ms) of one run."""
    tok = SimTokenizer()
    clock = LatenessClock()
    runner = SimRunner(Engine(EngineConfig(profile=STEP_5MS)), clock=clock)
    await runner.start()
    steps = round(seconds / 0.005)
    queues = [runner.submit(SimRequest(f"m{i}", [1, 2, 3], max_tokens=steps)) for i in range(3)]
    took: list[float] = []

    async def whales() -> None:
        while True:
            t0 = time.perf_counter()
            if mode != "none":
                assert await tokenize(mode, tok, text, slice_chars) == WHALE_TOKENS
            took.append((time.perf_counter() - t0) * 1e3)
            await asyncio.sleep(0.1)

    task = asyncio.create_task(whales())
    for q in queues:
        while not (await q.get()).finished:
            pass
    task.cancel()
    await runner.stop()
    return clock.late_ms, statistics.mean(took) if took else 0.0


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--slice-chars", type=int, default=TOKENIZE_SLICE_CHARS)
    args = ap.parse_args()
    if args.smoke:
        args.rounds, args.seconds = 1, 0.25
    tok = SimTokenizer()
    text = tok.decode(tok.generator(1).take(WHALE_TOKENS))
    modes = ("none", "blocking", "thread", "slices")
    late: dict[str, list[float]] = {m: [] for m in modes}
    took: dict[str, list[float]] = {m: [] for m in modes}
    default_interval = sys.getswitchinterval()
    for _ in range(args.rounds):
        for mode in modes:
            sys.setswitchinterval(0.0005 if mode == "thread" else default_interval)
            ms, t = asyncio.run(one(mode, args.seconds, text, args.slice_chars))
            late[mode] += ms
            took[mode].append(t)
    sys.setswitchinterval(default_interval)
    print("| mode | steps | lateness p50 ms | p99 ms | max ms | tokenize 72.6k ms (mean) |")
    print("|---|---|---|---|---|---|")
    p99s = {}
    for mode in modes:
        xs = sorted(late[mode])
        p99s[mode] = xs[min(len(xs) - 1, round(0.99 * (len(xs) - 1)))]
        print(f"| {mode} | {len(xs)} | {statistics.median(xs):.2f} | {p99s[mode]:.2f} "
              f"| {xs[-1]:.2f} | {statistics.mean(took[mode]):.1f} |")  # fmt: skip
    ratios = [ratio(f"step lateness p99, {mode} / none (no tokenizing)", p99s[mode],
                    p99s["none"], "ms", ".2f") for mode in modes[1:]]  # fmt: skip
    report(ratios, args.ratios)


if __name__ == "__main__":
    main()
