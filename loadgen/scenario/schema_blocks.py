"""Schema of the scenario's blocks other than groups: arrival (with traces), sim, warmup,
timeouts. Same conventions as schema.py: every error noted, None returned for a bad block."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

from loadgen.scenario.checks import (
    BOOL,
    TEXT,
    Checker,
    Rule,
    choice,
    did_you_mean,
    integer,
    join,
    number,
    show,
)
from loadgen.scenario.limits import MAX_SECONDS, MAX_TIME_SCALE
from loadgen.scenario.marked_yaml import MarkedMap
from loadgen.scenario.model import (
    DEFAULT_TRACE_BLOCK_TOKENS,
    MIN_PROMPT_TOKENS,
    RAMP_STRATEGIES,
    TRACE_BLOCK_TOKENS,
    TRACE_FORMATS,
    TRACE_SHARING,
    Arrival,
    Closed,
    Gamma,
    Poisson,
    Ramp,
    SimConfig,
    Staggered,
    Timeouts,
    Together,
    Trace,
    Warmup,
)
from loadgen.scenario.traces import TraceError, implied_reuse, infer_format, read_trace
from loadgen.sim.faults import parse_fault_options
from loadgen.sim.profile_file import ProfileFileError, is_profile_path, load_profile_file
from loadgen.sim.profiles import SIM_PROFILES
from loadgen.simoptions import SIM_OPTION_NAMES, SimOption

ARRIVAL_KEYS = {
    "together": (),
    "staggered": ("interval_s",),
    "closed": ("concurrency", "count", "duration_s"),
    "poisson": ("rate_per_s", "count", "duration_s", "concurrency", "ramp", "exact_span"),
    "gamma": (
        "rate_per_s",
        "burstiness",
        "count",
        "duration_s",
        "concurrency",
        "ramp",
        "exact_span",
    ),
    "trace": ("path", "format", "limit", "time_scale", "sharing", "block_tokens"),
}
RAMP_KEYS = ("strategy", "start_rate_per_s", "end_rate_per_s")


def _sim_rule(o: SimOption) -> Rule:
    if o.kind is bool:
        return BOOL
    if o.kind is int:
        return integer(*o.int_bounds())
    return number(ge=o.lo, le=o.hi)


# The `sim:` block's settings in SimConfig's order (that of the launch's argv), each checked by
# its row's type and bounds.
SIM_RULES = {
    f.name: _sim_rule(SIM_OPTION_NAMES[f.name])
    for f in fields(SimConfig)
    if f.name in SIM_OPTION_NAMES and SIM_OPTION_NAMES[f.name].sim_block
}
# A sweep's sim flags by every name a sweep may give them (aliases too), each by its row's rule:
# `num_gpu_blocks_override: [0]` or `long_prefill_token_threshold: [-1]` passed validation and
# failed the arm at boot.
SWEEP_RULES = {n: _sim_rule(o) for n, o in SIM_OPTION_NAMES.items() if o.sweep}
FAULT_FORMS = (
    "the sim's --fault forms: http500=P, http429=P, drop=P, stall=P, stall_s=S, cache_dead, "
    "drift=PCT_PER_HOUR, max_waiting=N, warm_mismatch=P, early_eos=F"
)
POSITIVE = integer(1)
MAYBE_POSITIVE = integer(1, nullable=True)
SECONDS = number(gt=0, le=MAX_SECONDS)
MAYBE_SECONDS = number(gt=0, le=MAX_SECONDS, nullable=True)
RATE = number(gt=0)
TIME_SCALE = number(gt=0, le=MAX_TIME_SCALE)


def arrival(c: Checker, root: MarkedMap, base_dir: Path) -> Arrival | None:
    """`together` or a one-key mapping {kind: {parameters}}."""
    value = root.get("arrival", "together")
    loc = root.value_locs.get("arrival", root.loc)
    kinds = tuple(ARRIVAL_KEYS)
    if value in ("together", None):
        return Together()
    if isinstance(value, str) and value in kinds:
        keys = ", ".join(ARRIVAL_KEYS[value])
        c.add(loc, "arrival", f"got {show(value)} alone (expected {{{value}: {{{keys}}}}})")
        return None
    if isinstance(value, str):
        c.bad(loc, "arrival", value, choice(kinds))
        return None
    if not isinstance(value, MarkedMap) or len(value) != 1:
        got = f"{len(value)} kinds" if isinstance(value, MarkedMap) else show(value)
        c.add(loc, "arrival", f"got {got} (expected exactly one of: {', '.join(kinds)})")
        return None
    (kind,) = value
    if kind not in kinds:
        hint = did_you_mean(kind, kinds)
        c.at_key(
            value, kind, "arrival", f"unknown arrival (expected one of: {', '.join(kinds)}{hint})"
        )
        return None
    path = join("arrival", kind)
    params = c.mapping(value, kind, "arrival")
    c.keys(params, path, ARRIVAL_KEYS[kind])
    if kind == "together":
        return Together()
    if kind == "staggered":
        return Staggered(c.field(params, "interval_s", path, SECONDS))
    if kind == "trace":
        return _trace(c, params, path, base_dir)
    count = c.field(params, "count", path, MAYBE_POSITIVE, None)
    duration = c.field(params, "duration_s", path, MAYBE_SECONDS, None)
    if kind == "closed":
        return Closed(c.field(params, "concurrency", path, POSITIVE), count, duration)
    rate, ramp = _rate(c, params, path, count, duration)
    cap = c.field(params, "concurrency", path, MAYBE_POSITIVE, None)
    exact = c.field(params, "exact_span", path, BOOL, False)
    if exact and (count is None or duration is not None or "ramp" in params):
        c.at_key(params, "exact_span", path, "scales `count` arrivals to count / rate_per_s: "
                 "give a count and rate_per_s, no ramp or duration_s")  # fmt: skip
    if kind == "poisson":
        return Poisson(rate, count, duration, cap, ramp, exact)
    burstiness = c.field(params, "burstiness", path, RATE)
    return Gamma(rate, burstiness, count, duration, cap, ramp, exact)


def _rate(
    c: Checker, params: MarkedMap, path: str, count: int | None, duration: float | None
) -> tuple[float | None, Ramp | None]:
    """An open loop's `rate_per_s` or its `ramp`, exactly one of them. A ramp runs over the
    rep's requests (vllm bench serve's), so a duration alone cannot size it."""
    if "ramp" not in params:
        return c.field(params, "rate_per_s", path, RATE), None
    if "rate_per_s" in params:
        c.at_key(params, "ramp", path, "give rate_per_s or a ramp, not both")
        return None, None
    if count is None and duration is not None:
        c.at_key(params, "ramp", path, "a ramp runs over `count` requests (expected a count "
                 "beside duration_s)")  # fmt: skip
    at = join(path, "ramp")
    m = c.mapping(params, "ramp", path, required=True)
    c.keys(m, at, RAMP_KEYS)
    strategy = c.field(m, "strategy", at, choice(RAMP_STRATEGIES))
    start = c.field(m, "start_rate_per_s", at, RATE)
    end = c.field(m, "end_rate_per_s", at, RATE)
    if strategy is None or start is None or end is None:
        return None, None
    return None, Ramp(strategy, start, end)


def names_trace(root: MarkedMap) -> bool:
    """The scenario's arrival is written as `{trace: ...}`, whether or not its file reads."""
    value = root.get("arrival")
    return isinstance(value, MarkedMap) and list(value) == ["trace"]


def _trace(c: Checker, params: MarkedMap, path: str, base_dir: Path) -> Trace | None:
    name = c.field(params, "path", path, TEXT)
    fmt = c.field(params, "format", path, choice(TRACE_FORMATS), None)
    limit = c.field(params, "limit", path, MAYBE_POSITIVE, None)
    scale = c.field(params, "time_scale", path, TIME_SCALE, 1.0)
    sharing = c.field(params, "sharing", path, choice(TRACE_SHARING), None)
    block_tokens = c.field(params, "block_tokens", path, MAYBE_POSITIVE, None)
    if name is None or scale is None:
        return None
    file = (base_dir / name).resolve()
    if not file.is_file():
        why = f"got {show(name)}: no such file {file}"
        c.at_value(params, "path", path, f"{why} (expected a trace file, relative to the scenario)")
        return None
    fmt = fmt or infer_format(file)
    if fmt is None:
        formats = ", ".join(TRACE_FORMATS)
        why = f"got {show(name)}: its format is not recognisable"
        c.at_value(params, "path", path, f"{why} (expected format: one of {formats})")
        return None
    try:
        rows, skipped = read_trace(file, fmt, limit, scale)
    except (TraceError, OSError, UnicodeDecodeError) as exc:
        why = f"unreadable trace: {exc}"
        c.at_value(params, "path", path, f"{why} (expected a readable {fmt} trace)")
        return None
    block_tokens = block_tokens or TRACE_BLOCK_TOKENS.get(fmt, DEFAULT_TRACE_BLOCK_TOKENS)
    has_ids = any(r.hash_ids for r in rows)
    if sharing == "hash_ids" and not has_ids:
        why = f"got hash_ids but {name} has no hash_ids column"
        c.at_value(params, "sharing", path, f"{why} (expected salted, or a mooncake trace)")
    sharing = sharing or ("hash_ids" if has_ids else "salted")
    implied = implied_reuse(rows, block_tokens) if has_ids else None
    return Trace(file, fmt, limit, scale, rows, sharing, block_tokens, implied, skipped)


def warmup(c: Checker, root: MarkedMap, trace_mode: bool) -> Warmup:
    """`warmup: N`, or {count, tokens, max_tokens} to size the warmups apart from the groups."""
    value = root.get("warmup", 0)
    if isinstance(value, MarkedMap):
        m = value
        c.keys(m, "warmup", ("count", "tokens", "max_tokens"))
        count = c.field(m, "count", "warmup", integer(0))
    else:
        m = MarkedMap(root.loc)
        count = c.field(root, "warmup", "", integer(0), 0)
    tokens = c.field(m, "tokens", "warmup", integer(MIN_PROMPT_TOKENS, nullable=True), None)
    max_tokens = c.field(m, "max_tokens", "warmup", MAYBE_POSITIVE, None)
    if trace_mode and count and (tokens is None or max_tokens is None):
        need = "tokens and max_tokens under a trace arrival"
        c.at_value(root, "warmup", "", f"needs {need} (expected {{count, tokens, max_tokens}})")
    return Warmup(count or 0, tokens, max_tokens)


def timeouts(c: Checker, root: MarkedMap) -> Timeouts:
    m = c.mapping(root, "timeouts", "")
    defaults = Timeouts()
    keys = ("connect_s", "first_token_s", "idle_s", "total_s")
    c.keys(m, "timeouts", keys)
    values = {k: c.field(m, k, "timeouts", MAYBE_SECONDS, getattr(defaults, k)) for k in keys}
    return Timeouts(**values)


def sim(c: Checker, root: MarkedMap, base_dir: Path) -> SimConfig:
    m = c.mapping(root, "sim", "")
    c.keys(m, "sim", ("profile", *SIM_RULES, "faults"))
    flags = {k: c.field(m, k, "sim", rule, None) for k, rule in SIM_RULES.items()}
    items = c.sequence(m, "faults", "sim")
    for i, item in enumerate(items):
        problem = _fault_problem(item)
        if problem:
            c.add(items.item_locs[i], f"sim.faults[{i}]", problem)
    profile = _sim_profile(c, m, base_dir)
    return SimConfig(profile, faults=tuple(items), **flags)


def _sim_profile(c: Checker, m: MarkedMap, base_dir: Path) -> str:
    """A built-in profile's name, or a profile file (`loadgen calibrate`'s) made absolute:
    relative to the scenario file, so a launched sim reads the same file from anywhere."""
    ref = c.field(m, "profile", "sim", TEXT, "default")
    if ref is None or not is_profile_path(ref):
        return c.field(m, "profile", "sim", choice(tuple(SIM_PROFILES)), "default") or "default"
    path = (base_dir / ref).resolve()
    try:
        load_profile_file(path)
    except ProfileFileError as exc:
        c.at_value(m, "profile", "sim", str(exc))
    return str(path)


def _fault_problem(item: Any) -> str | None:
    if not isinstance(item, str):
        return f"got {show(item)} (expected a string, one of {FAULT_FORMS})"
    try:
        parse_fault_options([item])
    except ValueError as exc:
        return f"{str(exc).partition('; ')[0]} (expected {FAULT_FORMS})"
    return None


# analysis/registry.py's SLO keys; the scenario sits below analysis, so a test holds them equal.
SLO_KEYS = ("ttft_s", "tpot_ms", "e2e_s")


def slo(c: Checker, root: MarkedMap) -> dict[str, float] | None:
    """`slo: {ttft_s, tpot_ms, e2e_s}`: any of them, each a number > 0."""
    if root.get("slo") is None:
        return None
    m = c.mapping(root, "slo", "")
    c.keys(m, "slo", SLO_KEYS)
    values = {k: c.field(m, k, "slo", MAYBE_SECONDS, None) for k in SLO_KEYS}
    out = {k: float(v) for k, v in values.items() if v is not None}
    if not out and not c.errors:
        c.at_key(root, "slo", "", "got no objective (expected any of ttft_s, tpot_ms, e2e_s)")
    return out or None


# Each sampling field's rule: vLLM's own bounds (a top_k of -1 or 0 turns it off).
SAMPLING_RULES = {
    "temperature": number(ge=0),
    "top_p": number(gt=0, le=1),
    "top_k": integer(-1),
    "min_p": number(ge=0, le=1),
    "frequency_penalty": number(ge=-2, le=2),
    "presence_penalty": number(ge=-2, le=2),
    "repetition_penalty": number(gt=0),
}


def sampling(c: Checker, root: MarkedMap) -> dict[str, float] | None:
    """`sampling: {temperature, top_p, ...}`: fields every request's body carries."""
    if root.get("sampling") is None:
        return None
    m = c.mapping(root, "sampling", "")
    c.keys(m, "sampling", tuple(SAMPLING_RULES))
    values = {k: c.field(m, k, "sampling", rule, None) for k, rule in SAMPLING_RULES.items()}
    return {k: v for k, v in values.items() if v is not None} or None
