"""The scenario schema: a marked YAML tree in, a Scenario out, every error noted on the way.

Top level and groups live here; the other blocks in schema_blocks.py. Sweeps are resolved in
load.py (a client-side axis re-validates the whole tree per value).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadgen.scenario import schema_blocks as blocks
from loadgen.scenario import schema_server
from loadgen.scenario.checks import (
    BOOL,
    NAME,
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
from loadgen.scenario.limits import MAX_SECONDS, SEED_MAX
from loadgen.scenario.marked_yaml import MarkedMap
from loadgen.scenario.model import (
    API_KINDS,
    CACHE_MODES,
    MIN_PROMPT_TOKENS,
    OPEN_LOOP_START_KINDS,
    Arrival,
    Group,
    Metrics,
    PromptConfig,
    Scenario,
    Trace,
    default_prefix_tokens,
)
from loadgen.scenario.schema_dataset import dataset as dataset_block
from loadgen.scenario.schema_dataset import refused_file, sizes_output
from loadgen.scenario.schema_session import session as session_block
from loadgen.scenario.soak_block import soak

TOP_KEYS = (
    "name",
    "description",
    "api",
    "chat_template_kwargs",
    "seed",
    "model",
    "groups",
    "arrival",
    "repetitions",
    "warmup",
    "metrics",
    "timeouts",
    "sim",
    "sweep",
    "slo",
    "server",
    "soak",
    "sampling",
)
GROUP_KEYS = (
    "name", "count", "prompt", "max_tokens", "min_tokens", "ignore_eos", "start", "session",
)  # fmt: skip
PROMPT_KEYS = ("tokens", "shape", "cache", "prefix_tokens", "depth", "dataset")
DEPTH = number(ge=0.0, le=1.0)
TOKENS = integer(MIN_PROMPT_TOKENS)
MAYBE_TOKENS = integer(MIN_PROMPT_TOKENS, nullable=True)
POSITIVE = integer(1)
SEED = Rule(
    "an integer of at most 63 bits",
    lambda v: integer().accepts(v) and abs(v) <= SEED_MAX,
)
OPTIONAL_TEXT = Rule("a string or null", lambda v: v is None or isinstance(v, str), nullable=True)
SHAPE_EXPECT = "prose, code, needle or {file: path}"
FROM_TRACE = "set by each trace row (expected no value here: remove it)"
FROM_SESSION = "set by the session block (expected no value here: remove it)"
FROM_DATASET = "set by each dataset row (expected no value here: remove it)"


def build_scenario(root: Any, source: Path, display: str, c: Checker) -> Scenario | None:
    """The Scenario described by `root` (sweep not included), or None when anything is wrong."""
    if not isinstance(root, MarkedMap):
        c.add(f"{display}:1", "scenario", f"got {show(root)} (expected a mapping of fields)")
        return None
    c.keys(root, "", TOP_KEYS)
    base_dir = source.parent
    arrival = blocks.arrival(c, root, base_dir)
    # A trace sizes the groups even when its file is unreadable: checked as a trace's groups,
    # a bad file is one error (it also said max_tokens, count and prompt.tokens were missing).
    traced = isinstance(arrival, Trace) or blocks.names_trace(root)
    api = c.field(root, "api", "", choice(API_KINDS), "completions")
    metrics = c.mapping(root, "metrics", "")
    c.keys(metrics, "metrics", ("poll_interval_s",))
    fields = dict(
        name=c.field(root, "name", "", NAME),
        description=c.field(root, "description", "", TEXT, ""),
        api=api,
        chat_template_kwargs=_template_kwargs(c, root, api),
        seed=c.field(root, "seed", "", SEED),
        model=c.field(root, "model", "", OPTIONAL_TEXT, None),
        groups=_groups(c, root, base_dir, arrival, api, traced),
        arrival=arrival,
        repetitions=c.field(root, "repetitions", "", POSITIVE, 1),
        warmup=blocks.warmup(c, root, traced),
        metrics=Metrics(c.field(metrics, "poll_interval_s", "metrics", blocks.SECONDS, 0.25)),
        timeouts=blocks.timeouts(c, root),
        sim=blocks.sim(c, root, base_dir) if root.get("sim") is not None else None,
        slo=blocks.slo(c, root),
        server=schema_server.server(c, root, base_dir) if root.get("server") is not None else None,
        source=source,
        soak=soak(c, root) if root.get("soak") is not None else None,
        sampling=blocks.sampling(c, root),
    )
    if c.errors:
        return None
    return Scenario(**fields)


def _template_kwargs(c: Checker, root: MarkedMap, api: str | None) -> dict[str, Any] | None:
    if root.get("chat_template_kwargs") is None:
        return None
    kwargs = c.mapping(root, "chat_template_kwargs", "")
    if api == "completions":
        message = "only applies to api: chat (expected api: chat, or remove it)"
        c.at_key(root, "chat_template_kwargs", "", message)
    return dict(kwargs)


def _groups(
    c: Checker,
    root: MarkedMap,
    base_dir: Path,
    arrival: Arrival | None,
    api: str | None,
    traced: bool,
) -> tuple[Group, ...]:
    items = c.sequence(root, "groups", "", required=True)
    if isinstance(root.get("groups"), list) and not items:
        c.at_value(root, "groups", "", "got an empty list (expected at least one group)")
    groups, seen = [], set()
    for i, item in enumerate(items):
        name = item.get("name") if isinstance(item, MarkedMap) else None
        path = f"groups.{name}" if NAME.accepts(name) else f"groups[{i}]"
        if not isinstance(item, MarkedMap):
            c.add(items.item_locs[i], path, f"got {show(item)} (expected a mapping)")
            continue
        if name in seen:
            message = f"got {show(name)} again (expected unique group names)"
            c.at_value(item, "name", path, message)
        seen.add(name)
        groups.append(_group(c, item, path, base_dir, arrival, api, traced))
    return tuple(groups)


def _group(
    c: Checker,
    m: MarkedMap,
    path: str,
    base_dir: Path,
    arrival: Arrival | None,
    api: str | None,
    trace_mode: bool,
) -> Group:
    c.keys(m, path, GROUP_KEYS)
    if trace_mode and "max_tokens" in m:
        c.at_key(m, "max_tokens", path, FROM_TRACE)
    sized_out = sizes_output(m)
    if trace_mode:
        max_tokens = None
    else:
        max_tokens = c.field(m, "max_tokens", path, POSITIVE, *((None,) if sized_out else ()))
    min_tokens = c.field(m, "min_tokens", path, integer(0, nullable=True), None)
    if None not in (max_tokens, min_tokens) and min_tokens > max_tokens:
        message = f"got {min_tokens} (expected <= max_tokens, {max_tokens})"
        c.at_value(m, "min_tokens", path, message)
    start = c.field(m, "start", path, number(ge=0, le=MAX_SECONDS), 0.0)
    if start and arrival is not None and arrival.kind not in OPEN_LOOP_START_KINDS:
        why = f"got {show(m['start'])} under a {arrival.kind} arrival"
        c.at_value(m, "start", path, f"{why} (expected start only with together or staggered)")
    session = session_block(c, m, path, arrival, api)
    prompt = _prompt(c, m, path, base_dir, "session" if "session" in m else trace_mode)
    if prompt.dataset is not None:
        _dataset_group(c, m, path, prompt, arrival)
    return Group(
        name=c.field(m, "name", path, NAME),
        count=c.field(m, "count", path, POSITIVE, *((1,) if trace_mode else ())),
        prompt=prompt,
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        ignore_eos=c.field(m, "ignore_eos", path, BOOL, True),
        start_s=start or 0.0,
        session=session,
    )


def _prompt(
    c: Checker, group: MarkedMap, group_path: str, base_dir: Path, sized: bool | str
) -> PromptConfig:
    """`sized`: True under a trace arrival, "session" for a session group (whose block sizes
    the turns and makes `prompt` optional), else False."""
    m = c.mapping(group, "prompt", group_path, required=sized != "session")
    path = join(group_path, "prompt")
    c.keys(m, path, PROMPT_KEYS)
    trace_mode = sized is True
    if "dataset" in m:
        return _dataset_prompt(c, m, path, base_dir, sized)
    if sized and "tokens" in m:
        c.at_key(m, "tokens", path, FROM_SESSION if sized == "session" else FROM_TRACE)
    tokens = None if sized else c.field(m, "tokens", path, TOKENS)
    cache = c.field(m, "cache", path, choice(CACHE_MODES), "salted")
    if trace_mode and cache not in (None, "salted"):
        why = f"got {show(cache)} under a trace arrival"
        c.at_value(m, "cache", path, f"{why} (expected salted: trace rows vary in size)")
    shape, file = _shape(c, m, path, base_dir)
    prefix = c.field(m, "prefix_tokens", path, MAYBE_TOKENS, None)
    if prefix is not None and cache == "salted":
        message = "only applies to cache shared or primed (expected one of those, or remove it)"
        c.at_key(m, "prefix_tokens", path, message)
    elif prefix is not None and tokens is not None and prefix > tokens:
        c.at_value(m, "prefix_tokens", path, f"got {prefix} (expected <= tokens, {tokens})")
    if prefix is None and cache in ("shared", "primed") and tokens is not None:
        prefix = default_prefix_tokens(tokens)
    depth = _depth(c, m, path, shape, cache, sized)
    return PromptConfig(tokens, shape or "prose", cache or "salted", prefix, file, depth)


def _dataset_prompt(
    c: Checker, m: MarkedMap, path: str, base_dir: Path, sized: bool | str
) -> PromptConfig:
    """A prompt whose rows come from a dataset file: no size, shape or prefix of its own."""
    for key in ("tokens", "shape", "prefix_tokens", "depth"):
        if key in m:
            c.at_key(m, key, path, FROM_DATASET)
    if sized:
        what = "a session block" if sized == "session" else "a trace arrival"
        why = f"got a dataset with {what}, which sizes the prompts itself"
        c.at_key(m, "dataset", path, f"{why} (expected one of the two)")
    cache = c.field(m, "cache", path, choice(CACHE_MODES), "salted")
    if cache == "primed":
        why = "got primed for a dataset, whose rows share no prefix to prime"
        c.at_value(m, "cache", path, f"{why} (expected salted or shared)")
    config = dataset_block(c, m, path, base_dir)
    return PromptConfig(None, "dataset", cache or "salted", dataset=config)


def _dataset_group(
    c: Checker, m: MarkedMap, path: str, prompt: PromptConfig, arrival: Arrival | None
) -> None:
    """A dataset replayed as sessions starts like a session group's."""
    d = prompt.dataset
    if d is None or d.turns != "all":
        return
    if arrival is not None and arrival.kind not in OPEN_LOOP_START_KINDS:
        why = f"got turns: all under a {arrival.kind} arrival (conversations are sessions)"
        c.at_key(m, "prompt", path, f"{why} (expected arrival together or staggered)")


def _depth(
    c: Checker, m: MarkedMap, path: str, shape: str | None, cache: str | None, sized: bool | str
) -> float | None:
    """A needle's depth (fraction of the prompt before the fact; 0.5 when not given). A needle
    is planted in one salted prompt of a set size: a shared prefix would plant one code in
    every stream, a trace row or session turn sizes the prompt elsewhere."""
    if shape != "needle":
        if "depth" in m:
            c.at_key(m, "depth", path, "only applies to shape needle (expected it removed)")
        return None
    if sized or cache not in (None, "salted"):
        why = "needs cache salted, outside trace arrivals and sessions"
        c.at_value(m, "shape", path, f"got needle here ({why})")
    return c.field(m, "depth", path, DEPTH, 0.5)


def _shape(c: Checker, m: MarkedMap, path: str, base_dir: Path) -> tuple[str | None, Path | None]:
    """`prose`, `code`, or {file: path relative to the scenario file} (read to check it)."""
    value = m.get("shape", "prose")
    if value in ("prose", "code", "needle"):
        return value, None
    if not (isinstance(value, MarkedMap) and list(value) == ["file"]):
        options = ("prose", "code", "needle", "file")
        hint = did_you_mean(value, options) if isinstance(value, str) else ""
        c.at_value(m, "shape", path, f"got {show(value)} (expected {SHAPE_EXPECT}{hint})")
        return None, None
    name = c.field(value, "file", join(path, "shape"), TEXT)
    if name is None:
        return None, None
    refused = refused_file(name)
    if refused:
        c.at_value(value, "file", join(path, "shape"), refused)
        return None, None
    file = (base_dir / name).resolve()
    outside = c.outside(name, base_dir)
    if outside:
        c.at_value(value, "file", join(path, "shape"), outside)
        return None, None
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = f"got {show(name)}: cannot read {file} ({exc.__class__.__name__})"
        c.at_value(value, "file", join(path, "shape"), f"{why} (expected a UTF-8 text file)")
        return None, None
    if not text.strip():
        message = f"got {show(name)}, an empty file (expected a file with text)"
        c.at_value(value, "file", join(path, "shape"), message)
    return "file", file
