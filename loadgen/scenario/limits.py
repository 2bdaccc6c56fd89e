"""Upper bounds checked before any work starts, all stated here.

A plan too large to finish, a prompt longer than the target's window, or a YAML file whose
aliases expand without end would otherwise pass `validate` and then hang while memory grows.

- MAX_STREAMS: requests of a whole run (every arm, rep and warmup), and below it what this
  host's available memory holds at BYTES_PER_REQUEST each. Override both with the environment
  variable LOADGEN_MAX_STREAMS.
- MAX_PROMPT_TOKENS: the longest prompt any scenario may ask for, whatever the target. Override
  with LOADGEN_MAX_PROMPT_TOKENS.
- MAX_YAML_NODES: values of a scenario file after alias expansion (no override: no scenario
  comes near it, a billion-laughs file goes far past it).
- A request's prompt plus max_tokens must fit the target's window: the sim's max_model_len
  (simoptions' SIM_MAX_MODEL_LEN, the sim server's own default, unless the scenario's `sim:`
  block sets one), or an external server's `max_model_len` from /v1/models when it gives one
  (checked at run start).
- MAX_ARMS: arms of a sweep, counted from its axes before any arm is built (a 6 x 10 sweep
  asked for 10^6 and held 263 MB before it had built them).
- MAX_SECONDS: any one time a scenario states (think, interval, duration, start) and the
  planned span of one arm (a trace after time_scale, a session's turns of thinking, an open
  loop's count / rate): a week. MAX_TIME_SCALE bounds a trace's time_scale.
- MAX_WORKERS and WORKERS_PER_CORE: client processes (`--workers`); each is a whole Python
  process with its own pipes, so 5000 forked without end and 100000 hit EMFILE after 55 s.
- The built-in sim's own bounds (MAX_SIM_BLOCKS, SIM_SPEED) are its vocabulary's, in
  loadgen/simoptions.py, where its CLI and the scenario's sim block both read them.
- SEED_MAX: seeds are stored as JSON integers, which orjson writes only up to 64 bits.
- Command-line SLOs must be finite numbers (nan, inf and 1e999 passed `> 0` or crashed
  the report), each key once.
"""

from __future__ import annotations

import math
import os

from loadgen.scenario.model import (
    DURATION_REQUEST_CAP,
    Closed,
    Gamma,
    Group,
    Poisson,
    Scenario,
    Staggered,
    Trace,
)
from loadgen.simoptions import SIM_MAX_MODEL_LEN

# Problems with the limits' own environment variables, reported by size_problems (an import
# must not raise: LOADGEN_MAX_STREAMS=abc used to crash every command with a traceback).
ENV_PROBLEMS: list[str] = []


def _env_limit(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    if raw.strip().isdigit() and int(raw) >= 1:
        return int(raw)
    ENV_PROBLEMS.append(
        f"{name}: got {raw!r} (expected a whole number >= 1; unset it for {default})"
    )
    return default


MAX_STREAMS = _env_limit("LOADGEN_MAX_STREAMS", 10_000_000)
# Memory a request takes at its stage's peak, measured on bench/analysis_scale.yaml (1k-token
# prompts, 32-token answers): 0.6 KiB planned, 13 KiB in a virtual-clock run (1.36 GB at
# 100,000), 22 KiB analysed (its record 3.1, the summary 6.5, redacted and canonical copies
# of it while summary.json is written). Longer answers take more: a record holds each chunk.
BYTES_PER_REQUEST = 24 * 1024
MAX_PROMPT_TOKENS = _env_limit("LOADGEN_MAX_PROMPT_TOKENS", 1 << 20)
MAX_YAML_NODES = 100_000
MAX_ARMS = 1000
MAX_SECONDS = 7 * 86_400.0
MAX_TIME_SCALE = 1000.0
MAX_WORKERS = 256
WORKERS_PER_CORE = 4
SEED_MAX = (1 << 63) - 1


def worker_limit(*, ray: bool, cores: int | None = None) -> int:
    """The most `--workers` a run may ask for: WORKERS_PER_CORE per local core for processes
    (more only share the cores), MAX_WORKERS either way (Ray actors run on other hosts)."""
    if ray:
        return MAX_WORKERS
    return min(MAX_WORKERS, WORKERS_PER_CORE * (cores or os.cpu_count() or 1))


def workers_problem(workers: int, *, ray: bool) -> str | None:
    """Why `--workers N` cannot run, one line naming the flag and the limit, or None."""
    limit = worker_limit(ray=ray)
    if workers <= limit:
        return None
    where = "Ray actors" if ray else f"{WORKERS_PER_CORE} per core on this host"
    return (
        f"--workers {workers}: more than the limit of {limit} ({where}; expected at most {limit})"
    )


def client_problems(workers: int | None, ray_address: str | None) -> list[str]:
    """What is wrong with `--workers` / `--ray` before any worker starts, one line each."""
    out = []
    if ray_address is not None and not ray_address.strip():
        out.append("--ray '': no address (expected auto, HOST:PORT or local)")
    if workers is not None:
        problem = workers_problem(workers, ray=bool(ray_address))
        if problem:
            out.append(problem)
    return out


def arms_problem(sizes: list[int]) -> str | None:
    """Why a sweep with axes of these lengths has too many arms, or None; counted, not built."""
    arms = math.prod(sizes)
    if arms <= MAX_ARMS:
        return None
    product = " x ".join(map(str, sizes))
    return f"{product} = {arms} arms exceed the limit of {MAX_ARMS} (expected fewer axis values)"


def planned_seconds(s: Scenario) -> float:
    """A lower bound on how long one rep of `s` takes by its own schedule: its last start, a
    trace's span, an open loop's count / rate or duration, a session's thinking."""
    a = s.arrival
    starts = [g.start_s for g in s.groups]
    if isinstance(a, Staggered):
        starts.append(a.interval_s * max(0, sum(g.count for g in s.groups) - 1))
    elif isinstance(a, Trace) and a.rows:
        starts.append(a.rows[-1].offset_ns / 1e9)
    elif isinstance(a, Poisson | Gamma):
        starts.append(a.duration_s or _open_span_s(a, a.count or 0))
    elif isinstance(a, Closed) and a.duration_s:
        starts.append(a.duration_s)
    thinking = [g.session.think_s * (g.session.turns - 1) for g in s.groups if g.session]
    return max(starts, default=0.0) + max(thinking, default=0.0)


def requests_bound(s: Scenario) -> int:
    """Requests one arm of `s` can send, warmup included, read off the scenario before a plan
    is built (a plan of 10^9 requests would hang building it): a session sends one request per
    turn, two for a tool's turn. The plan's own count is ArmPlan.planned_streams."""
    a = s.arrival
    per_rep = sum(g.count * _session_requests(g) for g in s.groups)
    if isinstance(a, Trace):
        per_rep = len(a.rows)
    elif isinstance(a, Closed | Poisson | Gamma):
        per_rep = _open_count(a, per_rep)
    return s.warmup.count + s.repetitions * per_rep


def _session_requests(g: Group) -> int:
    if g.replays_turns and g.prompt.dataset is not None:
        return max((len(r.turns) for r in g.prompt.dataset.rows), default=1)
    if g.session is None:
        return 1
    return g.session.turns * (2 if g.session.tools is not None else 1)


def _open_count(a: Closed | Poisson | Gamma, per_rep: int) -> int:
    if a.count is not None:
        return a.count
    if a.duration_s is None:
        return per_rep
    if isinstance(a, Closed):
        return DURATION_REQUEST_CAP
    # A ramp needs a count beside a duration (the schema says so): a rate is here.
    assert a.rate_per_s is not None
    return math.ceil(a.rate_per_s * a.duration_s) + 1


def _open_span_s(a: Poisson | Gamma, count: int) -> float:
    """The mean time `count` arrivals of `a` take: count / rate, or a ramp's mean gaps."""
    if a.ramp is None:
        assert a.rate_per_s is not None  # the schema gives one of rate_per_s and ramp
        return count / a.rate_per_s
    return sum(1 / a.ramp.rate_at(i, count) for i in range(1, count))


def largest_requests(s: Scenario) -> list[tuple[str, int, int]]:
    """(what, prompt tokens, prompt + max_tokens) of each request shape of `s`, largest first."""
    out = [
        (f"groups.{g.name}", g.prompt.tokens, g.prompt.tokens + (g.max_tokens or 0))
        for g in s.groups
        if g.prompt.tokens is not None
    ]
    if isinstance(s.arrival, Trace) and s.arrival.rows:
        row = max(s.arrival.rows, key=lambda r: r.input_tokens + r.output_tokens)
        out.append(("arrival.trace", row.input_tokens, row.input_tokens + row.output_tokens))
    return sorted(out, key=lambda x: -x[2])


def sim_window(s: Scenario) -> int:
    """The built-in sim's max_model_len for this scenario."""
    return (s.sim.max_model_len if s.sim else None) or SIM_MAX_MODEL_LEN


def window_problem(s: Scenario, window: int, target: str) -> str | None:
    """Why a request of `s` cannot run on a target with context window `window`, or None."""
    for what, prompt, total in largest_requests(s):
        if total > window:
            return (
                f"{what}: prompt {prompt} + max_tokens {total - prompt} = {total} tokens exceeds "
                f"{target}'s max_model_len {window} (expected a smaller prompt or max_tokens)"
            )
    return None


def size_problems(arms: list[Scenario]) -> list[str]:
    """Plan-size and prompt-size limits broken by the arms of a scenario, one line each."""
    problems = list(ENV_PROBLEMS)
    total = sum(requests_bound(s) for s in arms)
    if total > MAX_STREAMS:
        problems.append(
            f"plan: {total} requests (count x repetitions x arms, warmup included) exceed the "
            f"limit of {MAX_STREAMS} (expected fewer; set LOADGEN_MAX_STREAMS to allow more)"
        )
    elif (short := memory_problem(total, available_memory())) is not None:
        problems.append(short)
    for what, prompt, _ in largest_requests(arms[0]) if arms else []:
        if prompt > MAX_PROMPT_TOKENS:
            problems.append(
                f"{what}: a prompt of {prompt} tokens exceeds the limit of {MAX_PROMPT_TOKENS} "
                "(expected fewer; set LOADGEN_MAX_PROMPT_TOKENS to allow more)"
            )
            break
    span = max((planned_seconds(s) for s in arms), default=0.0)
    if span > MAX_SECONDS:
        problems.append(
            f"plan: one rep is scheduled over {span:.3g} s, beyond the limit of "
            f"{MAX_SECONDS:.0f} s (a week; expected shorter waits, a smaller time_scale or "
            "a faster rate)"
        )
    return problems


def available_memory() -> int | None:
    """Bytes this host can still give a process (MemAvailable), None where it does not say."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def memory_problem(total: int, available: int | None) -> str | None:
    """Why `total` requests would not fit in `available` bytes at BYTES_PER_REQUEST each, or
    None (also when the memory is unknown, or LOADGEN_MAX_STREAMS states the user's own
    limit)."""
    if available is None or "LOADGEN_MAX_STREAMS" in os.environ:
        return None
    need = total * BYTES_PER_REQUEST
    if need <= available:
        return None
    gib = 1 << 30
    return (
        f"plan: {total} requests need about {need / gib:.1f} GiB to run and analyse "
        f"({BYTES_PER_REQUEST // 1024} KiB each), more than the {available / gib:.1f} GiB this "
        f"host has available (expected at most {available // BYTES_PER_REQUEST}; set "
        f"LOADGEN_MAX_STREAMS={total} to run it anyway)"
    )
