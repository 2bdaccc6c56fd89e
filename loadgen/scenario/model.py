"""A scenario: the validated, frozen description of a run. `load.py` builds it; `plan()` reads it.

Choices the file format makes (scenarios/README.md is the user's reference):
- Groups say WHAT is sent (prompt size, shape, cache mode, output length) and how many streams;
  the arrival pattern says WHEN. `together` and `staggered` place each group's streams from the
  group's `start`; `poisson`, `gamma`, `closed` and `trace` draw one request sequence from all
  groups, interleaved in proportion to their `count` (smooth weighted round robin), so a group
  `start` is refused there.
- `burstiness` of a gamma arrival is vLLM benchmark_serving's `--burstiness`: the gamma shape k.
  k = 1 is Poisson; k < 1 burstier; the squared coefficient of variation of the gaps is 1/k.
- `prefix_tokens` (shared/primed) defaults to all but a short per-stream tail:
  tokens - min(DEFAULT_TAIL_TOKENS, tokens // 4).
- A sweep key with a dot is a client-side axis (a `--set` path such as `groups.streams.count`:
  no server restart); a key without one is a server flag named as vLLM names it (restart).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, ClassVar

from loadgen.client.endpoint import Timeouts as Timeouts

API_KINDS = ("completions", "chat")
SHAPES = ("prose", "code", "file", "needle")
CACHE_MODES = ("salted", "shared", "primed")
DATASET_FORMATS = ("sharegpt", "jsonl", "csv", "hf")
# Output length: the dataset's (ShareGPT: its gpt answer's tokens; else `output_field`) or
# the group's max_tokens.
DATASET_OUTPUTS = ("dataset", "fixed")
DATASET_TOO_LONG = ("skip", "refuse")
DATASET_TURNS = ("first", "all")
TRACE_FORMATS = ("mooncake", "bailian", "azure", "burstgpt")
# How trace rows reach the server: `hash_ids` rebuilds each row's shared prefix blocks from its
# hash_ids (Mooncake); `salted` sends every row salted, so nothing can hit the cache.
TRACE_SHARING = ("hash_ids", "salted")
# Prefix block size of each trace's hash_ids: Mooncake 512 tokens, Qwen-Bailian 16.
TRACE_BLOCK_TOKENS = {"mooncake": 512, "bailian": 16}
DEFAULT_TRACE_BLOCK_TOKENS = 512
# Server flags a sweep may vary (vLLM's names, dashes as underscores). Sim-only knobs included:
# loadgen/simoptions.py's rows with `sweep` and their aliases (tests/sim/test_sim_options.py).
SERVER_FLAGS = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "block_size",
    "num_gpu_blocks",
    "num_gpu_blocks_override",
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "num_speculative_tokens",
    "acceptance_rate",
    "speed",
    "gpu_memory_utilization",
    "kv_cache_dtype",
    "max_model_len",
    "long_prefill_token_threshold",
    "max_num_partial_prefills",
    "scheduling_policy",
    "swap_space",
    "cpu_offload_gb",
    "tensor_parallel_size",
    "enforce_eager",
)
# The salt tag and a little text must fit in every prompt of a scenario file, of a trace row
# (raised to it, and said so) and of a warmup; a group built in code may ask for less
# (`loadgen request --prompt-tokens 1`), and its salt tag is trimmed to fit (prompts.py).
MIN_PROMPT_TOKENS = 16
DEFAULT_TAIL_TOKENS = 64
# A closed loop bounded only by duration_s still needs a finite plan: at most this many requests.
DURATION_REQUEST_CAP = 10_000


def default_prefix_tokens(tokens: int) -> int:
    """Shared prefix length when a scenario gives none: all but a short per-stream tail."""
    return tokens - min(DEFAULT_TAIL_TOKENS, tokens // 4)


@dataclass(frozen=True, slots=True)
class DatasetRow:
    """One prompt of a dataset: `text` (ShareGPT: the first human turn) and its output length
    in tokens (None: the group's max_tokens). A multi-turn ShareGPT row also has every human
    turn in `turns` and, per turn, the tokens of the gpt answer that followed it in `answers`.
    `input_tokens` is `text` counted on loadgen's tokenizer (the sim's), what the length
    filters read; `line` is where the row starts in its file."""

    text: str
    output_tokens: int | None
    turns: tuple[str, ...] = ()
    answers: tuple[int, ...] = ()
    input_tokens: int = 0
    line: int = 0


@dataclass(frozen=True, slots=True)
class DatasetConfig:
    """A group's `prompt.dataset`: prompts read from a file instead of built to a size.
    `rows` are the rows that passed the length filters (scenario/datasets.py reads them);
    `read` counts every row of the file, `filtered` those the filters dropped, and `skipped`
    those longer than the target's window under `too_long: skip` (set at run start)."""

    path: Path
    format: str
    text_field: str = "prompt"
    output_field: str | None = None
    output: str = "dataset"
    min_input_tokens: int | None = None
    max_input_tokens: int | None = None
    min_output_tokens: int | None = None
    max_output_tokens: int | None = None
    too_long: str = "skip"
    turns: str = "first"
    rows: tuple[DatasetRow, ...] = ()
    read: int = 0
    filtered: int = 0
    skipped: int = 0


@dataclass(frozen=True, slots=True)
class PromptConfig:
    """`tokens` is None under a trace arrival, where each trace row gives the size, and for a
    dataset, whose rows are the prompts."""

    tokens: int | None
    shape: str
    cache: str
    prefix_tokens: int | None = None
    file: Path | None = None
    # shape needle: where the planted fact starts, as a fraction of the prompt (loadgen/needle.py).
    depth: float | None = None
    dataset: DatasetConfig | None = None


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """A multi-turn conversation per stream of the group (`count` sessions). Turn 0 sends the
    system prompt + one user message; every later turn resends the conversation so far (the
    assistant's answers as the server returned them) + a new user message, so the context
    grows by answer + `user_tokens` per turn, like an agent's tool loop. A turn whose prompt
    would pass `max_context_tokens` is not sent: the session ends there. `think_s` waits
    between an answer and the next turn: fixed, or drawn exponential with that mean (seeded).
    Sizes are content tokens; a chat template adds its own few per message."""

    turns: int
    system_tokens: int
    user_tokens: int
    max_context_tokens: int | None = None
    think_s: float = 0.0
    think: str = "fixed"
    # Every turn calls a tool (chat only): the request offers one function, the server's
    # answer calls it, the tool takes `latency_s` and its result (`result_tokens` of text)
    # goes back as the turn's second request, whose answer ends the turn.
    tools: ToolTurns | None = None


@dataclass(frozen=True, slots=True)
class ToolTurns:
    latency_s: float
    result_tokens: int


THINK_KINDS = ("fixed", "exponential")


@dataclass(frozen=True, slots=True)
class Group:
    """`max_tokens` is None only under a trace arrival, where each trace row gives it, or for
    a dataset whose rows give it (`output: dataset`). `session` makes each of the `count`
    streams a multi-turn conversation; so does a ShareGPT dataset with `turns: all`, whose
    conversations replay the dataset's own user turns."""

    name: str
    count: int
    prompt: PromptConfig
    max_tokens: int | None
    min_tokens: int | None = None
    ignore_eos: bool = True
    start_s: float = 0.0
    session: SessionConfig | None = None

    @property
    def replays_turns(self) -> bool:
        """Each stream is a dataset conversation replayed turn by turn."""
        d = self.prompt.dataset
        return d is not None and d.turns == "all"


@dataclass(frozen=True, slots=True)
class Together:
    kind: ClassVar[str] = "together"


@dataclass(frozen=True, slots=True)
class Staggered:
    interval_s: float
    kind: ClassVar[str] = "staggered"


@dataclass(frozen=True, slots=True)
class Closed:
    """At most `concurrency` in flight; `count` requests, or until `duration_s`, whichever first."""

    concurrency: int
    count: int | None = None
    duration_s: float | None = None
    kind: ClassVar[str] = "closed"


RAMP_STRATEGIES = ("linear", "exponential")


@dataclass(frozen=True, slots=True)
class Ramp:
    """A request rate that moves from `start_rate_per_s` to `end_rate_per_s` over the rep's
    requests, as vllm bench serve's --ramp-up-strategy: request i of n arrives at the rate of
    progress i / (n - 1), linearly or geometrically between the two."""

    strategy: str
    start_rate_per_s: float
    end_rate_per_s: float

    def rate_at(self, i: int, n: int) -> float:
        """The rate (requests/s) of request `i` of `n`."""
        progress = i / max(n - 1, 1)
        start, end = self.start_rate_per_s, self.end_rate_per_s
        if self.strategy == "linear":
            return start + (end - start) * progress
        return start * (end / start) ** progress


@dataclass(frozen=True, slots=True)
class Poisson:
    """`rate_per_s` or a `ramp` (exactly one; rate_per_s is None under a ramp). `concurrency`
    caps the streams in flight: an arrival waits for a free seat, and its wait is recorded.
    `exact_span`: `count` gaps drawn, the first arrival one gap in, all scaled so the last
    comes at count / rate_per_s, as vllm bench serve schedules a rate: the span, and so the
    rate sent, the same whatever the seed."""

    rate_per_s: float | None
    count: int | None = None
    duration_s: float | None = None
    concurrency: int | None = None
    ramp: Ramp | None = None
    exact_span: bool = False
    kind: ClassVar[str] = "poisson"


@dataclass(frozen=True, slots=True)
class Gamma:
    """As Poisson, with gamma gaps of shape `burstiness`."""

    rate_per_s: float | None
    burstiness: float
    count: int | None = None
    duration_s: float | None = None
    concurrency: int | None = None
    ramp: Ramp | None = None
    exact_span: bool = False
    kind: ClassVar[str] = "gamma"


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One trace request: offset from the trace's first row (already time-scaled)."""

    offset_ns: int
    input_tokens: int
    output_tokens: int
    # Prefix-block ids (Mooncake's hash_ids): equal leading ids mean an equal leading prefix.
    hash_ids: tuple[int, ...] = ()
    # Traces with conversations (Qwen-Bailian): the root chat's id and the row's turn.
    session: str | None = None
    turn: int | None = None


@dataclass(frozen=True, slots=True)
class TraceReuse:
    """The prefix reuse a trace implies with an unbounded cache: of all prompt tokens, the
    share in leading full blocks whose id appeared in an earlier row (`token_rate`, what vLLM's
    prefix_cache_hits/queries counters measure), and of all hash_ids, the share seen before
    (`block_rate`)."""

    token_rate: float
    block_rate: float
    hit_tokens: int
    prompt_tokens: int
    blocks_seen: int
    blocks: int


@dataclass(frozen=True, slots=True)
class Trace:
    path: Path
    format: str
    limit: int | None
    time_scale: float
    rows: tuple[TraceRow, ...]
    sharing: str = "salted"
    block_tokens: int = DEFAULT_TRACE_BLOCK_TOKENS
    implied: TraceReuse | None = None
    # Rows read but not replayed: they ask for no output tokens (BurstGPT's failed requests).
    skipped_rows: int = 0
    kind: ClassVar[str] = "trace"


Arrival = Together | Staggered | Closed | Poisson | Gamma | Trace
OPEN_LOOP_START_KINDS = ("together", "staggered")


@dataclass(frozen=True, slots=True)
class Warmup:
    """Requests sent one at a time before an arm's first rep; None sizes come from the groups."""

    count: int = 0
    tokens: int | None = None
    max_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class Metrics:
    poll_interval_s: float = 0.25


@dataclass(frozen=True, slots=True)
class SimConfig:
    """The simulated server used when no server is given; None fields take the profile's value.

    Its settings are loadgen/simoptions.py's rows with `sim_block` (tests/sim/test_sim_options.py
    holds them equal), in the order a launch's argv lists them. `faults` are the sim's
    `--fault` options as written (`http500=0.1`, `cache_dead`, ...).
    """

    profile: str = "default"
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int | None = None
    num_gpu_blocks: int | None = None
    enable_prefix_caching: bool | None = None
    num_speculative_tokens: int | None = None
    acceptance_rate: float | None = None
    speed: float | None = None
    max_model_len: int | None = None
    # Chat answers open with this many reasoning tokens (`delta.reasoning`), as vLLM's
    # reasoning parsers stream a thinking model's output.
    reasoning_tokens: int | None = None
    # Engine seconds the API server holds each request outside the engine's TTFT (a known
    # added TTFT, for testing the witness).
    api_delay_s: float | None = None
    faults: tuple[str, ...] = ()

    def flags(self) -> dict[str, Any]:
        """The flags this scenario sets (profile and faults excluded)."""
        skip = {"profile", "faults"}
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name not in skip and getattr(self, f.name) is not None
        }


SERVER_BLOCK_KINDS = ("vllm", "sglang", "llama.cpp", "sim", "command")


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """The scenario's `server:` block: what a run launches per boot (`--server` overrides it).
    `command` is the template of kind `command`; `served_name` the model id it lists."""

    kind: str
    model_path: Path | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    command: tuple[str, ...] = ()
    served_name: str | None = None
    python: Path | None = None
    bin: Path | None = None
    boot_timeout_s: float | None = None


@dataclass(frozen=True, slots=True)
class Soak:
    """The `soak:` block (soak_block.py parses it): `window` is `thirds` or a length."""

    duration_s: float = 3600.0
    window: str = "thirds"
    concurrency: int = 1


@dataclass(frozen=True, slots=True)
class SweepArm:
    """One point of a sweep. `flags` need a server (re)start; `settings` are client-side `--set`
    paths already applied to `scenario` (the base scenario when there are none)."""

    name: str
    flags: dict[str, Any]
    settings: dict[str, Any]
    scenario: Scenario


@dataclass(frozen=True, slots=True)
class Sweep:
    axes: tuple[tuple[str, tuple[Any, ...]], ...]
    arms: tuple[SweepArm, ...]
    # None: the engine decides (2 boots per arm for a real server; 1 for the deterministic sim).
    boots_per_arm: int | None = None


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    seed: int
    groups: tuple[Group, ...]
    arrival: Arrival = Together()
    description: str = ""
    api: str = "completions"
    chat_template_kwargs: dict[str, Any] | None = None
    model: str | None = None
    repetitions: int = 1
    warmup: Warmup = Warmup()
    metrics: Metrics = Metrics()
    timeouts: Timeouts = field(default_factory=Timeouts)
    sim: SimConfig | None = None
    sweep: Sweep | None = None
    server: ServerConfig | None = None
    source: Path | None = None
    # Service-level objectives for goodput: any of ttft_s, tpot_ms, e2e_s.
    slo: dict[str, float] | None = None
    soak: Soak | None = None
    # Sampling fields every request's body carries (temperature, top_p, ...; the names
    # schema_blocks.SAMPLING_RULES allows).
    sampling: dict[str, float] | None = None

    def group(self, name: str) -> Group:
        for g in self.groups:
            if g.name == name:
                return g
        raise KeyError(name)


def scenario_to_json(scenario: Scenario) -> dict[str, Any]:
    """The resolved scenario as plain JSON values (for run.json): trace rows are summarised by
    their count, sweep arms by name, flags and settings."""
    return _jsonable(scenario)


def raised_prompts(trace: Trace) -> dict[str, int] | None:
    """The trace rows that ask for fewer than MIN_PROMPT_TOKENS prompt tokens, which are sent
    with that many (the Azure code trace has 72 of 8,819, the smallest 3); None when none."""
    short = [r.input_tokens for r in trace.rows if r.input_tokens < MIN_PROMPT_TOKENS]
    if not short:
        return None
    return {"rows": len(short), "of": len(trace.rows), "smallest": min(short),
            "raised_to": MIN_PROMPT_TOKENS}  # fmt: skip


def _dataclass_json(value: Any) -> dict[str, Any]:
    # `value` stays Any: the arrival kinds are ClassVars that is_dataclass's narrowing hides.
    out = {"kind": value.kind} if hasattr(type(value), "kind") else {}
    return out | {f.name: _jsonable(getattr(value, f.name)) for f in fields(value)}


def _jsonable(value: Any) -> Any:
    if isinstance(value, Trace):
        out: dict[str, Any] = {"kind": "trace", "path": str(value.path), "format": value.format}
        out |= {"limit": value.limit, "time_scale": value.time_scale, "rows": len(value.rows)}
        implied = None if value.implied is None else _jsonable(value.implied)
        out |= {"sharing": value.sharing, "block_tokens": value.block_tokens}
        out |= {"implied_reuse": implied, "raised_prompts": raised_prompts(value)}
        return out | {"skipped_rows": value.skipped_rows}
    if isinstance(value, DatasetConfig):
        skip = {"rows"}
        out = {
            f.name: _jsonable(getattr(value, f.name)) for f in fields(value) if f.name not in skip
        }
        return out | {"rows": len(value.rows)}
    if isinstance(value, SweepArm):
        return {"name": value.name, "flags": value.flags, "settings": value.settings}
    if is_dataclass(value):
        return _dataclass_json(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value
