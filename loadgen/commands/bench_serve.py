"""`loadgen bench serve`: `vllm bench serve`'s flags under their own names, run by loadgen.

The flags become a scenario (scenario/bench.py, validated like a file), the scenario runs as
`loadgen run` runs one (a --base-url / --host / --port, a launched --server, or the built-in
sim), and the end prints bench's summary block (report/bench_layout.py) and loadgen's
verdicts, and writes bench's result JSON (analysis/bench_result.py) into the run directory and,
with --save-result, where bench would. Every flag of vLLM 0.32's `vllm bench serve --help=all`
is in FLAGS: mapped, or refused in one line that says why (README "Switching from vllm bench"
is generated from it)."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

import click
import orjson

from loadgen.analysis.bench_result import DEFAULT_METRICS, METRIC_HEADERS, BenchSetup
from loadgen.clock import ClockName
from loadgen.commands.options import Problems, RunArgs, run_like, usable_options
from loadgen.scenario.bench import GOODPUT_KEYS, BenchWorkload, RangeRatio

# Every flag of `vllm bench serve --help=all` (vLLM 0.32), with loadgen's equivalent.
MAPPED = {
    "--backend": "`vllm`, `openai`: `api: completions`; `openai-chat`: `api: chat` (the "
    "other backends are refused: loadgen streams text generation only)",
    "--endpoint": "`/v1/completions` or `/v1/chat/completions`, as `--backend` (another "
    "endpoint is refused)",
    "--model": "`--model` (the model the requests name; default the server's first)",
    "--served-model-name": "the model the requests name; `--model` stays `model_id` in the result",
    "--base-url": "`--base-url` (no URL, host or port: the built-in sim)",
    "--host": "`--base-url http://HOST:PORT` (port 8000 when not given)",
    "--port": "`--base-url http://HOST:PORT` (host 127.0.0.1 when not given)",
    "--dataset-name": "`random` (a sized prompt), `sharegpt` and `custom` (`prompt: {dataset: "
    "{format: sharegpt | jsonl}}`; sharegpt with bench's row filters: 4-1024 prompt tokens, "
    "at least 4 answer tokens, not its 2048 total), `burstgpt` (`arrival: {trace: {format: "
    "burstgpt}}`, its own timestamps); the others are refused",
    "--dataset-path": "the dataset's `path` (relative to the working directory)",
    "--random-input-len": "`prompt.tokens` (prefix included), as the server counts them",
    "--random-output-len": "`max_tokens`",
    "--random-prefix-len": "`prompt: {cache: shared, prefix_tokens: N}`, added to the input "
    "length; cold at the run's first request",
    "--random-range-ratio": "lengths drawn per request from [floor(L(1-r)), ceil(L(1+r))] "
    "with the seed; one group per distinct (input, output) pair drawn",
    "--input-len": "`--random-input-len`, and wins over it, as bench maps it (another dataset: "
    "refused, it would size nothing)",
    "--output-len": "`--random-output-len`, `--sharegpt-output-len` or `--custom-output-len`, "
    "as the dataset, and wins over them, as bench maps it",
    "--sharegpt-output-len": "`max_tokens` with `dataset.output: fixed` (default: the "
    "dataset's own answer length)",
    "--custom-output-len": "`max_tokens` with `dataset.output: fixed`; -1: `output: dataset`",
    "--num-prompts": "the arrival's `count` (the group's, under `together`)",
    "--max-concurrency": "`arrival: {closed: {concurrency: C}}` at `--request-rate inf`, else "
    "the rate's `concurrency: C`",
    "--request-rate": "`inf`: every request at once (`together`); R: `arrival: {poisson: "
    "{rate_per_s: R, exact_span: true}}` (bench's schedule: the last of N arrives at N/R "
    "whatever the seed)",
    "--burstiness": "`arrival: {gamma: {burstiness: K}}` (1: Poisson)",
    "--ramp-up-strategy": "`arrival: {poisson: {ramp: {strategy: ...}}}`",
    "--ramp-up-start-rps": "`ramp.start_rate_per_s`",
    "--ramp-up-end-rps": "`ramp.end_rate_per_s`",
    "--ignore-eos": "`ignore_eos: true`; the random dataset has it without the flag too, as "
    "bench sets it there (elsewhere, without it: false, as bench)",
    "--temperature": "`sampling: {temperature: T}`",
    "--top-p": "`sampling: {top_p: P}`",
    "--top-k": "`sampling: {top_k: K}`",
    "--min-p": "`sampling: {min_p: P}`",
    "--frequency-penalty": "`sampling: {frequency_penalty: X}`",
    "--presence-penalty": "`sampling: {presence_penalty: X}`",
    "--repetition-penalty": "`sampling: {repetition_penalty: X}`",
    "--chat-template-kwargs": "`chat_template_kwargs:` (chat only)",
    "--seed": "`--seed`: the run seed (prompts, salts, arrivals, lengths); default a fresh one "
    "per run, so a rerun on one boot is cold (bench's default 0 repeats its prompts)",
    "--num-warmups": "`warmup: {count: N}`",
    "--goodput": "`slo:` with bench's ms converted: `ttft:MS` -> `ttft_s`, `tpot:MS` -> "
    "`tpot_ms`, `e2el:MS` -> `e2e_s`; `request_goodput` as bench counts it",
    "--percentile-metrics": "which metrics the block and the result give (ttft, tpot, itl, "
    "e2el, client_queue_time, e2el_including_client_queue)",
    "--metric-percentiles": "the percentiles they give, e.g. `0,50,95,99.9` (0: the least)",
    "--save-result": "the result JSON where bench writes it (always also `bench_result.json` "
    "in the run directory; a stopped run writes only that, of the requests that finished); "
    "`--result-dir` is made before the run, a folder that cannot be is one line",
    "--append-result": "append the result as one more JSON line, as bench does",
    "--result-dir": "the folder of `--save-result`'s file (default: the working directory)",
    "--result-filename": "its name (default bench's: LABEL-RATEqps[-concurrencyC]-MODEL-DATE.json)",
    "--metadata": "KEY=VALUE fields added to the result JSON",
    "--label": "the result's `label` and its file name's prefix",
    "--tokenizer": "recorded as `tokenizer_id`; loadgen counts tokens with the server's own "
    "tokenizer (/tokenize)",
    "--disable-tqdm": "`--no-progress`",
}
_LOCAL_TOKENIZER = "loadgen loads no tokenizer: it sizes and counts with the server's /tokenize"
_DATASET = "a dataset loadgen does not read (random, sharegpt, custom, burstgpt only)"
# The flags of the datasets loadgen does not read.
OTHER_DATASET_FLAGS = (
    "--spec-bench-category",
    "--spec-bench-output-len",
    "--timed-trace-chunk-hash-size",
    "--timed-trace-label-hash-ids",
    "--timed-trace-label-input-length",
    "--timed-trace-label-output-length",
    "--timed-trace-label-timestamp",
    "--timed-trace-sec-multiplier",
    "--blazedit-max-distance",
    "--blazedit-min-distance",
    "--asr-max-audio-len-sec",
    "--asr-min-audio-len-sec",
    "--random-mm-base-items-per-request",
    "--random-mm-bucket-config",
    "--random-mm-limit-mm-per-prompt",
    "--random-mm-num-mm-items-range-ratio",
    "--hf-name",
    "--hf-output-len",
    "--hf-split",
    "--hf-subset",
    "--bfcl-categories",
    "--prefix-repetition-num-prefixes",
    "--prefix-repetition-output-len",
    "--prefix-repetition-prefix-len",
    "--prefix-repetition-suffix-len",
    "--speed-bench-category",
    "--speed-bench-dataset-subset",
    "--speed-bench-output-len",
)
REFUSED = {
    "--custom-ensure-client-side-data": _DATASET,
    "--disable-shuffle": "loadgen samples rows with the run seed; no unshuffled order",
    "--enable-multimodal-chat": "loadgen sends text only",
    "--extra-body": "loadgen sets a request's body itself; the sampling flags cover its fields",
    "--header": "loadgen sends no custom headers (OPENAI_API_KEY / --api-key sets the key)",
    "--insecure": "loadgen does not turn off TLS verification",
    "--logprobs": "loadgen asks for no logprobs",
    "--lora-assignment": "loadgen sends no LoRA requests",
    "--lora-modules": "loadgen sends no LoRA requests",
    "--no-oversample": "loadgen samples without replacement while rows last",
    "--no-stream": "loadgen reads local dataset files only",
    "--plot-dataset-stats": "loadgen's report.html plots the run",
    "--plot-timeline": "loadgen's report.html has every stream's timeline",
    "--timeline-itl-thresholds": "loadgen's report.html has every stream's timeline",
    "--probe-request-rate": "no probe stream beside the load; a scenario group can be one",
    "--profile": "loadgen does not drive the server's profiler",
    "--ready-check-timeout-sec": "loadgen checks the server before sending (GET /v1/models, 10 s)",
    "--request-id-prefix": "loadgen names each request by arm, rep, group and index",
    "--save-detailed": "the run directory's streams.jsonl holds every request's times",
    "--self-timed": "timed_trace datasets only; a trace arrival replays its own times",
    "--no-self-timed": "timed_trace datasets only; a trace arrival replays its own times",
    "--skip-chat-template": "loadgen renders no chat template: the server applies its own",
    "--skip-tokenizer-init": _LOCAL_TOKENIZER,
    "--tokenizer-mode": _LOCAL_TOKENIZER,
    "--trust-remote-code": _LOCAL_TOKENIZER,
    "--use-beam-search": "loadgen streams sampled text; no beam search",
    "--no-reranker": "reranking benchmarks only",
    "--random-batch-size": "embedding benchmarks only",
    **dict.fromkeys(OTHER_DATASET_FLAGS, _DATASET),
}
BACKENDS = {"vllm": "completions", "openai": "completions", "openai-chat": "chat"}
ENDPOINTS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
DATASETS = ("random", "sharegpt", "custom", "burstgpt")
# bench's flags that take several values after one flag (argparse nargs="+" / "*").
MANY_VALUES = ("--goodput", "--metadata")
# bench's --metric-percentiles default.
BENCH_PERCENTILES = (99.0,)


def flag_table() -> str:
    """README's table: every flag of `vllm bench serve`, loadgen's equivalent or why not."""
    rows = [f"| `{f}` | {MAPPED[f]} |" if f in MAPPED else f"| `{f}` | refused: {REFUSED[f]} |"
            for f in sorted({*MAPPED, *REFUSED})]  # fmt: skip
    return "\n".join(["| `vllm bench serve` flag | `loadgen bench serve` |", "|---|---|", *rows])


def _flag_name(token: str) -> str:
    """`--random_input_len=5` -> `--random-input-len` (bench takes either spelling)."""
    return "--" + token[2:].partition("=")[0].replace("_", "-")


class BenchCommand(click.Command):
    """bench's spellings in (underscores, several values after --goodput / --metadata), and a
    bench flag loadgen does not take refused in one line before click reads anything."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        out: list[str] = []
        many: str | None = None
        for token in args:
            if token.startswith("--"):
                name = _flag_name(token)
                if name in REFUSED:
                    raise click.UsageError(f"{name}: refused: {REFUSED[name]}", ctx)
                value = token.partition("=")
                token = name + (value[1] + value[2] if value[1] else "")
                many = name if name in MANY_VALUES and not value[1] else None
                out.append(token)
            elif many is not None and out[-1] != many:
                out += [many, token]
            else:
                out.append(token)
        return super().parse_args(ctx, out)


def _range_ratio(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Any:
    """bench's --random-range-ratio: a float for both lengths, or {"input": a, "output": b}."""
    if value is None:
        return RangeRatio()
    try:
        parsed = json.loads(value)
        ratios = (parsed, parsed) if isinstance(parsed, int | float) else (
            parsed["input"], parsed["output"])  # fmt: skip
        ratio = RangeRatio(float(ratios[0]), float(ratios[1]))
    except (ValueError, KeyError, TypeError):
        raise click.BadParameter(
            f'{value!r}: give a number in [0, 1) or {{"input": a, "output": b}}'
        ) from None
    if not all(0 <= r < 1 for r in (ratio.input, ratio.output)):
        raise click.BadParameter(f"{value!r}: each ratio must be in [0, 1)")
    return ratio


POSITIVE_RATE = click.FloatRange(min=0, min_open=True)


@click.group("bench")
def bench_group() -> None:
    """`vllm bench serve`'s flags, run by loadgen (`loadgen bench serve --help`)."""


@bench_group.command("serve", cls=BenchCommand)
@run_like()
@click.option("--backend", default="openai", show_default=True, help=MAPPED["--backend"])
@click.option("--endpoint", default=None, help=MAPPED["--endpoint"])
@click.option("--served-model-name", default=None, help=MAPPED["--served-model-name"])
@click.option("--host", default=None, help=MAPPED["--host"])
@click.option("--port", type=click.IntRange(1, 65535), default=None, help=MAPPED["--port"])
@click.option("--dataset-name", default="random", show_default=True,
              help=MAPPED["--dataset-name"])  # fmt: skip
@click.option("--dataset-path", type=click.Path(path_type=Path), default=None)
@click.option("--random-input-len", type=click.IntRange(1), default=None,
              help=MAPPED["--random-input-len"] + " [default: 1024]")  # fmt: skip
@click.option("--random-output-len", type=click.IntRange(1), default=None,
              help=MAPPED["--random-output-len"] + " [default: 128]")  # fmt: skip
@click.option("--random-prefix-len", type=click.IntRange(0), default=0, show_default=True)
@click.option("--random-range-ratio", callback=_range_ratio, default=None,
              help=MAPPED["--random-range-ratio"])  # fmt: skip
@click.option("--input-len", type=click.IntRange(1), default=None, help=MAPPED["--input-len"])
@click.option("--output-len", type=click.IntRange(1), default=None, help=MAPPED["--output-len"])
@click.option("--sharegpt-output-len", type=click.IntRange(1), default=None)
@click.option("--custom-output-len", type=click.IntRange(-1), default=256, show_default=True)
@click.option("--num-prompts", type=click.IntRange(1), default=1000, show_default=True)
@click.option("--max-concurrency", type=click.IntRange(1), default=None)
@click.option("--request-rate", type=POSITIVE_RATE, default=math.inf, show_default=True,
              help=MAPPED["--request-rate"])  # fmt: skip
@click.option("--burstiness", type=POSITIVE_RATE, default=1.0, show_default=True)
@click.option("--ramp-up-strategy", type=click.Choice(["linear", "exponential"]), default=None)
@click.option("--ramp-up-start-rps", type=POSITIVE_RATE, default=None)
@click.option("--ramp-up-end-rps", type=POSITIVE_RATE, default=None)
@click.option("--ignore-eos", is_flag=True, help=MAPPED["--ignore-eos"])
@click.option("--temperature", type=float, default=None)
@click.option("--top-p", type=float, default=None)
@click.option("--top-k", type=int, default=None)
@click.option("--min-p", type=float, default=None)
@click.option("--frequency-penalty", type=float, default=None)
@click.option("--presence-penalty", type=float, default=None)
@click.option("--repetition-penalty", type=float, default=None)
@click.option("--chat-template-kwargs", default=None, metavar="JSON")
@click.option("--num-warmups", type=click.IntRange(0), default=0, show_default=True)
@click.option("--goodput", multiple=True, metavar="KEY:MS ...", help=MAPPED["--goodput"])
@click.option("--percentile-metrics", default=None, help=MAPPED["--percentile-metrics"])
@click.option("--save-result", is_flag=True, help=MAPPED["--save-result"])
@click.option("--append-result", is_flag=True, help=MAPPED["--append-result"])
@click.option("--result-dir", type=click.Path(file_okay=False, path_type=Path), default=None)
@click.option("--result-filename", default=None, help=MAPPED["--result-filename"])
@click.option("--metadata", multiple=True, metavar="KEY=VALUE ...", help=MAPPED["--metadata"])
@click.option("--label", default=None)
@click.option("--tokenizer", default=None, help=MAPPED["--tokenizer"])
@click.option("--disable-tqdm", is_flag=True, help=MAPPED["--disable-tqdm"])
def bench_serve_cmd(args: RunArgs, **flags: Any) -> None:
    """Run `vllm bench serve`'s flags through loadgen: bench's summary block and result JSON,
    loadgen's verdicts and run directory. A bench flag loadgen does not take is refused."""
    request = bench_request(args, flags)
    if isinstance(request, list):
        raise Problems(request)
    run_bench(request)


@dataclass(frozen=True, slots=True)
class BenchRequest:
    """What the flags asked: the run's options, the workload, the result's setup (its model
    filled in once the run knows it), where bench would write the result (None: not asked)
    and whether to append to it."""

    args: RunArgs
    workload: BenchWorkload
    setup: BenchSetup
    save: bool = False
    append: bool = False
    result_dir: Path | None = None
    result_filename: str | None = None


def bench_request(args: RunArgs, flags: dict[str, Any]) -> BenchRequest | list[str]:
    """The request the flags make, or every usage mistake in them (one line each)."""
    problems: list[str] = []
    api = _api(flags["backend"], flags["endpoint"], problems)
    workload = _workload(flags, api, problems)
    metrics = _metrics(flags["percentile_metrics"], problems)
    # bench's default, 99; the option itself is run_like's, so `loadgen run` reads it alike.
    percentiles = args.metric_percentiles or BENCH_PERCENTILES
    metadata = _metadata(flags["metadata"], problems)
    model_id = args.target.model or ""
    args = _with_target(args, flags, problems)
    if problems:
        return problems
    ramp = None
    if workload.ramp_up_strategy is not None:
        assert workload.ramp_up_start_rps is not None and workload.ramp_up_end_rps is not None
        ramp = (workload.ramp_up_strategy, workload.ramp_up_start_rps, workload.ramp_up_end_rps)
    setup = BenchSetup(
        backend=flags["backend"], model_id=model_id, tokenizer_id=flags["tokenizer"] or "",
        num_prompts=workload.num_prompts, request_rate=workload.request_rate,
        burstiness=workload.burstiness, max_concurrency=workload.max_concurrency,
        date=datetime.now().strftime("%Y%m%d-%H%M%S"), label=flags["label"], ramp=ramp,
        metadata=metadata, percentile_metrics=metrics, percentiles=percentiles,
        goodput_ms=workload.goodput_ms,
    )  # fmt: skip
    return BenchRequest(args, workload, setup, flags["save_result"], flags["append_result"],
                        flags["result_dir"], flags["result_filename"])  # fmt: skip


def _api(backend: str, endpoint: str | None, problems: list[str]) -> str:
    """The API a backend and an endpoint name; a contradiction or another kind is a problem."""
    api = BACKENDS.get(backend)
    if api is None:
        problems.append(
            f"--backend {backend}: refused: loadgen streams text generation "
            f"(expected one of: {', '.join(BACKENDS)})"
        )
        return "completions"
    if endpoint is not None and endpoint.rstrip("/") != ENDPOINTS[api]:
        problems.append(
            f"--endpoint {endpoint}: refused: --backend {backend} streams {ENDPOINTS[api]}"
            " (loadgen speaks /v1/completions and /v1/chat/completions only)"
        )
    return api


def _workload(flags: dict[str, Any], api: str, problems: list[str]) -> BenchWorkload:
    """The workload flags as BenchWorkload (its seed the run's, once resolved); what loadgen
    cannot run as asked is a problem."""
    name = flags["dataset_name"]
    if name not in DATASETS:
        problems.append(f"--dataset-name {name}: refused: {_DATASET}")
    if name != "random" and flags["dataset_path"] is None:
        problems.append(f"--dataset-name {name} reads a file: give --dataset-path")
    problems += _random_problems(flags, name)
    rated = flags["request_rate"] != math.inf or flags["ramp_up_strategy"] is not None
    if name == "burstgpt" and (rated or flags["burstiness"] != 1.0 or flags["max_concurrency"]):
        problems.append(
            "--dataset-name burstgpt: loadgen replays the trace's own timestamps (bench "
            "ignores them): drop --request-rate, --burstiness, --ramp-up-* and --max-concurrency"
        )
    problems += _ramp_problems(flags)
    sampling = {k: flags[k] for k in SAMPLING_FLAGS if flags[k] is not None}
    output = flags["output_len"]
    return BenchWorkload(
        num_prompts=flags["num_prompts"], api=api, dataset_name=name,
        dataset_path=flags["dataset_path"],
        # bench's --input-len and --output-len win over the dataset's own length flags.
        input_len=flags["input_len"] or flags["random_input_len"] or 1024,
        output_len=output or flags["random_output_len"] or 128,
        prefix_len=flags["random_prefix_len"], range_ratio=flags["random_range_ratio"],
        sharegpt_output_len=output or flags["sharegpt_output_len"],
        custom_output_len=output or flags["custom_output_len"],
        request_rate=flags["request_rate"], burstiness=flags["burstiness"],
        max_concurrency=flags["max_concurrency"], ramp_up_strategy=flags["ramp_up_strategy"],
        ramp_up_start_rps=flags["ramp_up_start_rps"], ramp_up_end_rps=flags["ramp_up_end_rps"],
        ignore_eos=flags["ignore_eos"], sampling=sampling,
        goodput_ms=_goodput(flags["goodput"], problems),
        chat_template_kwargs=_template_kwargs(flags["chat_template_kwargs"], problems),
        warmups=flags["num_warmups"],
    )  # fmt: skip


SAMPLING_FLAGS = ("temperature", "top_p", "top_k", "min_p", "frequency_penalty",
                  "presence_penalty", "repetition_penalty")  # fmt: skip


def _random_problems(flags: dict[str, Any], name: str) -> list[str]:
    problems = []
    given = [f for f in ("random_input_len", "input_len", "random_output_len",
                         "random_range_ratio")
             if flags[f] not in (None, RangeRatio())] + (["random_prefix_len"] if
             flags["random_prefix_len"] else [])  # fmt: skip
    if name != "random" and given:
        flag = "--" + given[0].replace("_", "-")
        problems.append(f"{flag} sizes the random dataset: drop it or use --dataset-name random")
    if flags["random_prefix_len"] and flags["random_range_ratio"] != RangeRatio():
        problems.append(
            "--random-prefix-len with --random-range-ratio: refused: loadgen shares a prefix "
            "within a group, and each drawn length is a group of its own"
        )
    return problems


def _ramp_problems(flags: dict[str, Any]) -> list[str]:
    ramp = [flags[f] for f in ("ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps")]
    if all(v is None for v in ramp):
        return []
    if any(v is None for v in ramp):
        return ["--ramp-up-strategy, --ramp-up-start-rps and --ramp-up-end-rps go together"]
    if flags["request_rate"] != math.inf:
        return ["a ramp sets the rate: drop --request-rate or the --ramp-up-* flags"]
    return []


def _goodput(items: tuple[str, ...], problems: list[str]) -> dict[str, float]:
    """bench's `--goodput ttft:500 tpot:50` (ms each)."""
    out: dict[str, float] = {}
    for item in items:
        key, _, value = item.partition(":")
        try:
            ms = float(value)
        except ValueError:
            ms = math.nan
        if key not in GOODPUT_KEYS or not ms > 0 or math.isinf(ms):
            problems.append(
                f"--goodput {item}: expected KEY:MS with KEY one of ttft, tpot, e2el and MS "
                "a number > 0 (milliseconds, as bench takes them)"
            )
        else:
            out[key] = ms
    return out


def _template_kwargs(text: str | None, problems: list[str]) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        problems.append(f"--chat-template-kwargs {text}: expected a JSON object")
        return None
    return value


def _metrics(text: str | None, problems: list[str]) -> tuple[str, ...]:
    if text is None:
        return DEFAULT_METRICS
    names = tuple(n.strip() for n in text.split(","))
    unknown = [n for n in names if n not in METRIC_HEADERS]
    if unknown:
        problems.append(
            f"--percentile-metrics {text}: unknown {', '.join(unknown)} (expected any of "
            f"{', '.join(METRIC_HEADERS)})"
        )
    return names


def _metadata(items: tuple[str, ...], problems: list[str]) -> tuple[tuple[str, str], ...]:
    out = []
    for item in items:
        key, eq, value = item.partition("=")
        if not eq:
            problems.append(f"--metadata {item}: expected KEY=VALUE")
        out.append((key.strip(), value.strip()))
    return tuple(out)


def _with_target(args: RunArgs, flags: dict[str, Any], problems: list[str]) -> RunArgs:
    """--host / --port as a --base-url, and --served-model-name as the model requests name."""
    target = args.target
    host, port = flags["host"], flags["port"]
    if (host or port) and target.base_url:
        problems.append("give --base-url or --host/--port, not both")
    elif (host or port) and args.clock == ClockName.VIRTUAL:
        problems.append(
            "--clock virtual runs the built-in sim without HTTP; drop --host/--port or use "
            "--clock wall"
        )
    elif host or port:
        target = dataclasses.replace(
            target, base_urls=(f"http://{host or '127.0.0.1'}:{port or 8000}",)
        )
    if flags["served_model_name"]:
        target = dataclasses.replace(target, model=flags["served_model_name"])
    output = args.output
    if flags["disable_tqdm"]:
        output = dataclasses.replace(output, progress=False)
    return dataclasses.replace(args, target=target, output=output)


def result_path(req: BenchRequest, setup: BenchSetup) -> Path:
    """Where bench writes its result: --result-filename, else its own name, in --result-dir."""
    name = req.result_filename
    if name is None:
        cap = "" if setup.max_concurrency is None else f"-concurrency{setup.max_concurrency}"
        label = setup.label or setup.backend
        model = setup.model_id.split("/")[-1]
        if setup.ramp is not None:
            strategy, start, end = setup.ramp
            # bench's ramp rates are whole numbers: 5qps, not 5.0qps.
            start, end = (int(r) if r == int(r) else r for r in (start, end))
            load = f"ramp-up-{strategy}-{start}qps-{end}qps"
        else:
            load = f"{setup.request_rate}qps"
        name = f"{label}-{load}{cap}-{model}-{setup.date}.json"
    return (req.result_dir or Path.cwd()) / name


RESULT_NAME = "bench_result.json"


def run_bench(req: BenchRequest) -> None:
    """Runs the request as `loadgen run` runs a scenario; prints bench's block and loadgen's
    verdicts, writes the result JSON; exits 4 when a stream failed, as `loadgen run` does.
    Stopped (Ctrl-C), it prints the block of the requests that finished and writes them to
    bench_result.json, but no --save-result file: a script that collects those would take a
    cut run for a whole one."""
    from loadgen.commands.run import (
        FAILED_STREAMS_EXIT,
        execute_work,
        failure_summary,
        plan_work,
        report_stopped,
    )
    from loadgen.engine.preflight import check_out_root
    from loadgen.engine.target import RunError
    from loadgen.scenario.bench import bench_scenario
    from loadgen.scenario.load import ScenarioError
    from loadgen.scenario.plan import plan

    opts = usable_options(req.args)
    # The run seed (given, replayed or fresh) draws the lengths as it draws salts and arrivals.
    assert opts.run_seed is not None
    workload = dataclasses.replace(req.workload, seed=opts.run_seed)
    try:
        scenario = bench_scenario(workload, Path.cwd(), req.args.sets())
    except ScenarioError as exc:
        raise click.ClickException(str(exc)) from None
    saving = req.save or req.append
    if saving:
        # bench finds out only after its run that it cannot write there.
        try:
            check_out_root(result_path(req, req.setup).parent, "--result-dir")
        except RunError as exc:
            raise click.ClickException(str(exc)) from None
    said = ("interrupted: bench_result.json holds the requests that finished"
            + ("; no --save-result file, the run did not finish" if saving else ""))  # fmt: skip
    on_stop = partial(report_stopped, said, show=lambda d: _bench_report(req, d))
    run_dir = execute_work(plan_work(plan(scenario, run_seed=opts.run_seed), opts),
                           on_stop=on_stop)  # fmt: skip
    setup, text, records = _bench_report(req, run_dir)
    click.echo(f"run directory: {run_dir}")
    if saving:
        path = result_path(req, setup)
        with path.open("a" if req.append else "w", encoding="utf-8") as out:
            out.write(("\n" if req.append and out.tell() else "") + text)
        click.echo(f"result: {path}")
    summary = failure_summary(records)
    if summary:
        click.echo(f"Error: {summary}", err=True)
        sys.exit(FAILED_STREAMS_EXIT)


def _bench_report(req: BenchRequest, run_dir: Path) -> tuple[BenchSetup, str, list]:
    """Writes the run's report and bench_result.json, prints bench's block and loadgen's
    verdicts; the result's setup (its model the served one), its JSON text and the measured
    records."""
    from loadgen.analysis.bench_result import bench_result
    from loadgen.commands.run import measured_records
    from loadgen.report.bench_layout import bench_block
    from loadgen.report.cmd import write_report

    write_report(run_dir)
    records = measured_records(run_dir)
    served = records[0].model if records else ""
    setup = dataclasses.replace(
        req.setup, model_id=req.setup.model_id or served,
        tokenizer_id=req.setup.tokenizer_id or req.setup.model_id or served,
    )  # fmt: skip
    result = bench_result(records, setup)
    click.echo(bench_block(result, setup.percentile_metrics, setup.percentiles))
    click.echo(_verdict_lines(run_dir))
    text = orjson.dumps(result).decode()
    (run_dir / RESULT_NAME).write_text(text + "\n")
    return setup, text, records


# Beyond this many groups (--random-range-ratio makes one per drawn length pair) the verdicts
# print as one line of totals; report.txt keeps the table per group.
VERDICT_TABLE_GROUPS = 10


def _verdict_lines(run_dir: Path) -> str:
    """loadgen's verdicts per group (or in total) and the run's banner, from summary.json."""
    from collections import Counter

    from loadgen.analysis.summary_types import read_groups, read_run
    from loadgen.analysis.verdicts import VERDICTS
    from loadgen.report.banners import run_banner
    from loadgen.report.tables import to_plain
    from loadgen.report.text import verdict_table

    summary = orjson.loads((run_dir / "summary.json").read_bytes())
    banner = run_banner(read_run(summary))
    groups = read_groups(summary)
    if len(groups) <= VERDICT_TABLE_GROUPS:
        verdicts = to_plain(verdict_table(summary))
    else:
        total: Counter[str] = Counter()
        for g in groups:
            total.update(g.verdicts)
        counts = ", ".join(f"{v} {total[v]}" for v in VERDICTS if total[v])
        verdicts = f"Verdicts over {len(groups)} groups: {counts} (per group: report.txt)"
    return "\n".join([*([banner] if banner else []), verdicts])
