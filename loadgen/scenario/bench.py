"""`vllm bench serve`'s workload flags as a scenario: the tree a scenario file would hold, each
value marked with the flag that set it, validated by the loader like any file (load_tree), so
every check a scenario gets applies and an error names the flag to fix.

What maps where (README "Switching from vllm bench" has the whole table):
- `--dataset-name random`: prompts of `--random-input-len` tokens as the server counts them
  (vLLM's random dataset subtracts the tokenizer's special tokens so the server counts that
  many too), `--random-prefix-len` of them a prefix shared by every request, `--random-output-
  len` tokens out, EOS ignored (bench sets ignore_eos there whatever --ignore-eos says). With
  `--random-range-ratio r` each request's lengths are drawn uniformly from the integers
  [floor(L (1 - r)), ceil(L (1 + r))] (an output draw at least 1) with the run seed, as vLLM
  draws them (its own generator, so other draws); a scenario group has one size, so each
  distinct (input, output) pair drawn is a group whose count is how often it was drawn: the
  multiset of lengths is the draw, the order the groups' interleaving.
- `--dataset-name burstgpt`: the trace arrival of the file's first `--num-prompts` rows, their
  sizes and their own timestamps (bench takes only the sizes).
- `--request-rate inf` with no cap: every request at once (`together`); with
  `--max-concurrency C`: a closed loop of C seats; a finite rate: Poisson arrivals, gamma when
  `--burstiness` is not 1, scaled as bench scales them to end at N / rate (`exact_span`), with
  the cap as `concurrency`; `--ramp-up-*` as the rate's `ramp` (not scaled, as bench's).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.scenario.load import load_tree
from loadgen.scenario.marked_yaml import MarkedList, MarkedMap
from loadgen.scenario.model import Scenario

BENCH_NAME = "bench-serve"
INF = math.inf


@dataclass(frozen=True, slots=True)
class Flagged:
    """A value of the tree and the flag that set it (its location in an error line)."""

    value: Any
    flag: str


@dataclass(frozen=True, slots=True)
class RangeRatio:
    """`--random-range-ratio`: one float for both lengths, or {"input": a, "output": b}."""

    input: float = 0.0
    output: float = 0.0


@dataclass(frozen=True, slots=True)
class BenchWorkload:
    """The workload flags of `vllm bench serve`, as given (None: not given)."""

    num_prompts: int = 1000
    api: str = "completions"
    dataset_name: str = "random"
    dataset_path: Path | None = None
    input_len: int = 1024
    output_len: int = 128
    prefix_len: int = 0
    range_ratio: RangeRatio = RangeRatio()
    sharegpt_output_len: int | None = None
    custom_output_len: int = 256
    request_rate: float = INF
    burstiness: float = 1.0
    max_concurrency: int | None = None
    ramp_up_strategy: str | None = None
    ramp_up_start_rps: float | None = None
    ramp_up_end_rps: float | None = None
    ignore_eos: bool = False
    sampling: dict[str, float] = field(default_factory=dict)
    # bench's --goodput, in its ms: {"ttft": 500, "tpot": 50, "e2el": 10000}
    goodput_ms: dict[str, float] = field(default_factory=dict)
    seed: int = 0
    chat_template_kwargs: dict[str, Any] | None = None
    warmups: int = 0


def length_bounds(length: int, ratio: float, *, at_least: int = 0) -> tuple[int, int]:
    """The integers a length is drawn from: [floor(L (1 - r)), ceil(L (1 + r))]."""
    low, high = math.floor(length * (1 - ratio)), math.ceil(length * (1 + ratio))
    return max(low, at_least), max(high, at_least)


def random_lengths(w: BenchWorkload) -> list[tuple[int, int]]:
    """Per request (prompt tokens, output tokens): the prefix plus a draw around the input
    length, and a draw around the output length (at least 1), from the run seed."""
    rng = random.Random(w.seed)
    in_low, in_high = length_bounds(w.input_len, w.range_ratio.input)
    out_low, out_high = length_bounds(w.output_len, w.range_ratio.output, at_least=1)
    ins = [rng.randint(in_low, in_high) for _ in range(w.num_prompts)]
    outs = [rng.randint(out_low, out_high) for _ in range(w.num_prompts)]
    return [(w.prefix_len + i, o) for i, o in zip(ins, outs, strict=True)]


def bench_tree(w: BenchWorkload) -> dict[str, Any]:
    """The scenario tree the flags describe, leaves marked with their flags (module docstring)."""
    tree: dict[str, Any] = {
        "name": BENCH_NAME,
        "description": "vllm bench serve's flags, through loadgen bench serve",
        "seed": Flagged(w.seed, f"--seed {w.seed}"),
        "api": Flagged(w.api, "--backend/--endpoint"),
        "groups": _groups(w),
        "arrival": _arrival(w),
    }
    if w.sampling:
        tree["sampling"] = {
            k: Flagged(v, f"--{k.replace('_', '-')} {v}") for k, v in w.sampling.items()
        }
    if w.goodput_ms:
        tree["slo"] = _slo(w.goodput_ms)
    if w.chat_template_kwargs is not None:
        tree["chat_template_kwargs"] = Flagged(w.chat_template_kwargs, "--chat-template-kwargs")
    if w.warmups:
        tree["warmup"] = {"count": Flagged(w.warmups, f"--num-warmups {w.warmups}")}
    return tree


def _groups(w: BenchWorkload) -> list[dict[str, Any]]:
    eos = Flagged(w.ignore_eos, "--ignore-eos")
    if w.dataset_name == "random":
        # bench ignores EOS on its random dataset, --ignore-eos or not: answers run to length.
        eos = Flagged(True, "--dataset-name random")
        drawn = Counter(random_lengths(w))
        return [
            _random_group(w, tokens, out, count, eos)
            for (tokens, out), count in sorted(drawn.items())
        ]
    if w.dataset_name == "burstgpt":
        # Each trace row sizes its request; the rows come from the trace arrival.
        return [{"name": "burstgpt", "prompt": {"shape": "prose"}, "ignore_eos": eos}]
    return [{"name": w.dataset_name, "count": _num_prompts(w), "ignore_eos": eos,
             **_dataset(w)}]  # fmt: skip


def _num_prompts(w: BenchWorkload) -> Flagged:
    return Flagged(w.num_prompts, f"--num-prompts {w.num_prompts}")


def _random_group(
    w: BenchWorkload, tokens: int, out: int, count: int, eos: Flagged
) -> dict[str, Any]:
    fixed = w.range_ratio == RangeRatio()
    where = "--random-input-len/--random-prefix-len/--random-range-ratio"
    prompt: dict[str, Any] = {"tokens": Flagged(tokens, f"{where} ({tokens} tokens)")}
    if w.prefix_len:
        # Shared by every request of the group, cold at its first (its salt is the run's).
        prompt["cache"] = "shared"
        prompt["prefix_tokens"] = Flagged(w.prefix_len, f"--random-prefix-len {w.prefix_len}")
    return {
        "name": "random" if fixed else f"random-{tokens}-{out}",
        "count": _num_prompts(w) if fixed else count,
        "prompt": prompt,
        "max_tokens": Flagged(out, f"--random-output-len {w.output_len} ({out} drawn)"),
        "ignore_eos": eos,
    }


def _dataset(w: BenchWorkload) -> dict[str, Any]:
    """A file dataset's prompt block (datasets.py's `prompt: {dataset: ...}`) and output size."""
    path = Flagged(str(w.dataset_path), f"--dataset-path {w.dataset_path}")
    if w.dataset_name == "sharegpt":
        block: dict[str, Any] = {"path": path, "format": "sharegpt", "turns": "first"}
        out = w.sharegpt_output_len
        flag = f"--sharegpt-output-len {out}"
        # bench's own pruning of ShareGPT rows (its is_valid_sequence): 4 to 1024 prompt
        # tokens, and 4 answer tokens when the answer sizes the output. Its 2048-token cap on
        # prompt + answer has no dataset filter here.
        block |= {"min_input_tokens": 4, "max_input_tokens": 1024}
        block |= {"min_output_tokens": 4} if out is None else {}
    else:  # custom: JSONL rows with a "prompt" field, as vLLM's custom dataset reads them
        block = {"path": path, "format": "jsonl", "text_field": "prompt"}
        out = None if w.custom_output_len == -1 else w.custom_output_len
        flag = f"--custom-output-len {w.custom_output_len}"
        if out is None:
            block["output_field"] = "output_tokens"
    block["output"] = "dataset" if out is None else "fixed"
    sized = {} if out is None else {"max_tokens": Flagged(out, flag)}
    return {"prompt": {"dataset": block}, **sized}


def _arrival(w: BenchWorkload) -> Any:
    count = _num_prompts(w)
    if w.dataset_name == "burstgpt":
        path = Flagged(str(w.dataset_path), f"--dataset-path {w.dataset_path}")
        return {"trace": {"path": path, "format": "burstgpt", "limit": count}}
    cap = w.max_concurrency
    capped = {} if cap is None else {"concurrency": Flagged(cap, f"--max-concurrency {cap}")}
    if w.ramp_up_strategy is not None:
        ramp = {
            "strategy": Flagged(w.ramp_up_strategy, "--ramp-up-strategy"),
            "start_rate_per_s": Flagged(w.ramp_up_start_rps, "--ramp-up-start-rps"),
            "end_rate_per_s": Flagged(w.ramp_up_end_rps, "--ramp-up-end-rps"),
        }
        return _rate_arrival(w, {"ramp": ramp, **capped, "count": count})
    if math.isinf(w.request_rate):
        if cap is None:
            return "together"
        return {"closed": {**capped, "count": count}}
    rate = {"rate_per_s": Flagged(w.request_rate, f"--request-rate {w.request_rate}"),
            "exact_span": True}  # fmt: skip
    return _rate_arrival(w, {**rate, **capped, "count": count})


def _rate_arrival(w: BenchWorkload, params: dict[str, Any]) -> dict[str, Any]:
    if w.burstiness == 1.0:
        return {"poisson": params}
    burst = Flagged(w.burstiness, f"--burstiness {w.burstiness}")
    return {"gamma": {**params, "burstiness": burst}}


# bench's --goodput keys (ms) -> the scenario's slo keys and their units' factor from ms.
GOODPUT_KEYS = {"ttft": ("ttft_s", 1e-3), "tpot": ("tpot_ms", 1.0), "e2el": ("e2e_s", 1e-3)}


def _slo(goodput_ms: dict[str, float]) -> dict[str, Any]:
    out = {}
    for key, ms in goodput_ms.items():
        name, factor = GOODPUT_KEYS[key]
        out[name] = Flagged(ms * factor, f"--goodput {key}:{ms:g}")
    return out


def marked(value: Any, loc: str) -> Any:
    """The tree as the loader's marked values: a Flagged leaf located at its flag, the rest
    at `loc`."""
    if isinstance(value, Flagged):
        return marked(value.value, value.flag)
    if isinstance(value, dict):
        out = MarkedMap(loc)
        for key, item in value.items():
            here = item.flag if isinstance(item, Flagged) else loc
            out.put(key, marked(item, here), here, here)
        return out
    if isinstance(value, list):
        items = [marked(v, loc) for v in value]
        return MarkedList(loc, items, [loc] * len(items))
    return value


def bench_scenario(w: BenchWorkload, cwd: Path, overrides: tuple[str, ...] = ()) -> Scenario:
    """The validated scenario of the flags (ScenarioError naming the flag otherwise); a
    dataset path resolves against `cwd`, as the command line gave it."""
    root = marked(bench_tree(w), "loadgen bench serve")
    return load_tree(root, cwd / BENCH_NAME, "loadgen bench serve", overrides,
                     allow_files_outside=True)  # fmt: skip
