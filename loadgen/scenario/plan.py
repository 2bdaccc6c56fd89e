"""plan(): a scenario turned into every request of the run, with its intended send time.

Pure: no I/O, no clock. The same scenario and run seed give the same plan, byte for byte.

Shape of a plan: `Plan.arms` (one arm named "default" when there is no sweep), each with
`warmup` requests (sent one at a time, phase "warmup", before the arm's first rep, after every
boot) and `reps`; each rep lists the prefixes to prime and verify (`primes`) before its measured
`requests`. `RepPlan.concurrency` is the closed-loop limit (None: open loop, send each request
at `offset_ns` after the rep's start); `cap` an open loop's limit on streams in flight (an
arrival waits for a free seat); `duration_ns` stops issuing new requests at that offset.

Seeds: arrival schedules and prompt text come from the scenario's `seed`: every run sends the
same schedule and the same text; every rep the same schedule but its own text, so a rep never
finds the previous rep's tail of a shared prefix in the cache. Salts come from the run seed
(`run_seed`, else the scenario seed) and the scenario's name: a tag of words at the very start
of each prompt, unique within the plan (across arms, reps, groups, indices and warmups) and
different for another run seed or scenario, so a server that kept an earlier run's cache cannot
hit. `loadgen run` passes a fresh run seed per run (engine/seeds.py, recorded in run.json) to
stay cold against a long-lived server; `--seed`/`--replay` pass a recorded one to replay.
Shared prefixes are salted per (arm, rep, group): each rep's first stream pays the prefill.
Primed prefixes per (arm, group): each rep re-verifies a prefix that is already warm.
Trace rows with hash_ids (`sharing: hash_ids`) share one salt per (arm, rep): every block is
new to the server at the rep's start, and rows of the rep that name the same block share it.
A dataset group's rows are drawn with the run seed (`--seed` draws the same rows), without
replacement while rows last; every rep sends the same rows. A salted row opens with its salt
tag; a shared row is sent as the dataset wrote it (its own repeats may hit the cache).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np

from loadgen.scenario.model import (
    DURATION_REQUEST_CAP,
    MIN_PROMPT_TOKENS,
    Closed,
    DatasetRow,
    Gamma,
    Group,
    Poisson,
    Scenario,
    SessionConfig,
    Staggered,
    SweepArm,
    Together,
    Trace,
    TraceRow,
    default_prefix_tokens,
)
from loadgen.scenario.traces import full_blocks
from loadgen.scenario.vocab import SALT_WORDS

NS = 1_000_000_000
# Gaps are drawn in fixed-size blocks so a schedule's prefix never depends on its length.
_GAP_BLOCK = 4096


@dataclass(frozen=True, slots=True)
class PromptSpec:
    """What to build. Text = tag(salt) + body, the body from `text_seed`; or, for shared and
    primed prompts, prefix (tag(salt) + body from `prefix_seed`, `prefix_tokens` long) + a tail
    from `text_seed`; or, for a trace row with hash_ids, one `block_tokens` block per id in
    `blocks` (its text from the salt and the id) + a tail from `text_seed`. Equal `prefix_key`
    means equal prefix text and equal salt; the salt is also what the engine passes as vLLM's
    `cache_salt`."""

    tokens: int
    shape: str
    cache: str
    salt: str
    text_seed: int
    prefix_key: str | None = None
    prefix_tokens: int | None = None
    prefix_seed: int | None = None
    file: str | None = None
    blocks: tuple[int, ...] | None = None
    block_tokens: int | None = None
    # shape needle: the key its fact names ("<group>-<index>") and the fact's depth.
    needle_key: str | None = None
    needle_depth: float | None = None
    # A dataset row's own text, sent as it is (after the salt tag when salted); `tokens` is
    # then its count on loadgen's tokenizer, and the builder counts it on the target's.
    text: str | None = None


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    id: str
    arm: str
    group: str
    rep: int
    index: int
    phase: str
    offset_ns: int | None
    prompt: PromptSpec
    max_tokens: int
    min_tokens: int | None
    ignore_eos: bool
    api: str
    chat_template_kwargs: dict[str, Any] | None
    # A trace row that belongs to a conversation (Qwen-Bailian): its session id and turn.
    session: str | None = None
    turn: int | None = None
    # The scenario's `sampling:` fields, sent in every request's body.
    sampling: dict[str, float] | None = None


@dataclass(frozen=True, slots=True)
class PlannedTurn:
    """One turn of a session: its new user message, answer size, and the think time before
    it is sent (0 for turn 0). The prompt is the conversation so far + this message, built by
    the engine once the previous answer is in."""

    turn: int
    user: PromptSpec
    max_tokens: int
    think_ns: int
    # A turn that calls a tool: the tool's latency and the result it sends back.
    tool: PlannedTool | None = None


@dataclass(frozen=True, slots=True)
class PlannedTool:
    latency_ns: int
    result: PromptSpec


@dataclass(frozen=True, slots=True)
class PlannedSession:
    """A conversation: its system prompt (salted, so every session starts cold) and turns.
    `request` is the template of every turn's request (ids get `/t<turn>`)."""

    id: str
    offset_ns: int
    system: PromptSpec
    turns: tuple[PlannedTurn, ...]
    request: PlannedRequest

    @property
    def requests(self) -> int:
        """Requests the session sends: one per turn, two for a turn that sends a tool's result
        back."""
        return sum(2 if t.tool is not None else 1 for t in self.turns)


@dataclass(frozen=True, slots=True)
class RepPlan:
    rep: int
    requests: tuple[PlannedRequest, ...]
    concurrency: int | None
    primes: tuple[PromptSpec, ...]
    duration_ns: int | None = None
    sessions: tuple[PlannedSession, ...] = ()
    cap: int | None = None


@dataclass(frozen=True, slots=True)
class ArmPlan:
    name: str
    flags: dict[str, Any]
    settings: dict[str, Any]
    scenario: Scenario
    warmup: tuple[PlannedRequest, ...]
    reps: tuple[RepPlan, ...]

    @property
    def planned_streams(self) -> int:
        """Measured requests the plan holds, every session's requests included (agent_sessions
        once read "32 measured of 0 planned"); warmups and cache primes are not planned streams.
        An upper bound when `open_ended`."""
        return sum(len(r.requests) + sum(s.requests for s in r.sessions) for r in self.reps)

    @property
    def open_ended(self) -> bool:
        """A rep has a duration, which may end it before all its planned streams are sent."""
        return any(r.duration_ns is not None for r in self.reps)


@dataclass(frozen=True, slots=True)
class Plan:
    scenario: Scenario
    seed: int
    arms: tuple[ArmPlan, ...]
    boots_per_arm: int | None

    def requests(self) -> Iterator[PlannedRequest]:
        """Every request of the plan (warmups included), in plan order."""
        for arm in self.arms:
            yield from arm.warmup
            for rep in arm.reps:
                yield from rep.requests


def plan(scenario: Scenario, *, run_seed: int | None = None) -> Plan:
    seed = scenario.seed if run_seed is None else run_seed
    # The scenario's name is part of the salt: two scenarios run with one seed (whale_c4 and
    # whale_c4_cached) must not share a single salted prompt.
    salts = _Salts(derive_seed(seed, "salts", scenario.name))
    sweep = scenario.sweep
    arms = sweep.arms if sweep else (SweepArm("default", {}, {}, scenario),)
    planned = tuple(_arm(arm, salts, seed) for arm in arms)
    return Plan(scenario, seed, planned, sweep.boots_per_arm if sweep else None)


def derive_seed(*parts: object) -> int:
    """A 63-bit seed from any parts: stable across processes and Python versions."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


class _Salts:
    """Unique tags: the first word runs through a seeded permutation of SALT_WORDS by ordinal,
    so the first len(SALT_WORDS) prompts of a plan all differ at their first word."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.order = list(range(len(SALT_WORDS)))
        random.Random(derive_seed(seed, "salt-order")).shuffle(self.order)
        self.count = 0

    def next(self) -> str:
        n, k = len(SALT_WORDS), self.count
        self.count += 1
        digest = hashlib.blake2b(f"{self.seed}\x1f{k}".encode(), digest_size=8).digest()
        words = [self.order[k % n], self.order[(k // n) % n], digest[0] << 8 | digest[1]]
        words.append(digest[2] << 8 | digest[3])
        return "-".join(SALT_WORDS[w % n] for w in words)


class _Prompts:
    """PromptSpecs for one arm: shared prefixes once per (rep, group), primed once per group."""

    def __init__(self, scenario: Scenario, arm: str, salts: _Salts, run_seed: int) -> None:
        self.scenario, self.arm, self.salts = scenario, arm, salts
        self.prefixes: dict[tuple[Any, ...], str] = {}
        self.run_seed = run_seed
        self.drawn: dict[str, list[DatasetRow]] = {}

    def row(self, group: Group, index: int) -> DatasetRow:
        """The dataset row of the group's stream `index`."""
        drawn = self.drawn.get(group.name, [])
        if index >= len(drawn):
            # An open or closed loop may send a group more streams than its count.
            drawn = self.drawn[group.name] = draw_rows(
                group, self.run_seed, max(index + 1, group.count)
            )
        return drawn[index]

    def row_spec(self, group: Group, index: int, rep: int, text: str, cache: str) -> PromptSpec:
        """A dataset text as it is sent: salted (its own salt tag first) or as written."""
        row = self.row(group, index)
        text_seed = derive_seed(self.scenario.seed, "text", group.name, index, rep)
        salt = self.salts.next() if cache == "salted" else ""
        return PromptSpec(row.input_tokens, "dataset", cache, salt, text_seed, text=text)

    def spec(self, group: Group, index: int, rep: int, tokens: int | None = None) -> PromptSpec:
        p = group.prompt
        if p.dataset is not None:
            return self.row_spec(group, index, rep, self.row(group, index).text, p.cache)
        wanted = tokens if tokens is not None else p.tokens
        # A group's prompt has no size only under a trace arrival, whose rows all give one.
        assert wanted is not None
        # A trace row's size is raised to the floor (and reported); a group's is sent as
        # declared: a scenario file's are at least the floor, and one built in code may ask for
        # less (`loadgen request --prompt-tokens 1`: the builder trims the salt tag to fit).
        size = wanted if tokens is None else max(wanted, MIN_PROMPT_TOKENS)
        text_seed = derive_seed(self.scenario.seed, "text", group.name, index, rep)
        file = str(p.file) if p.file else None
        if p.cache == "salted":
            key = f"{group.name}-{index}" if p.shape == "needle" else None
            return PromptSpec(
                size, p.shape, "salted", self.salts.next(), text_seed, file=file,
                needle_key=key, needle_depth=p.depth,
            )  # fmt: skip
        salt = self._prefix_salt((None if p.cache == "primed" else rep, group.name))
        prefix_seed = derive_seed(self.scenario.seed, "prefix", group.name)
        key = f"{self.arm}/{group.name}/{salt}"
        prefix = default_prefix_tokens(size) if p.prefix_tokens is None else p.prefix_tokens
        return PromptSpec(size, p.shape, p.cache, salt, text_seed, key, prefix, prefix_seed, file)

    def blocks(self, group: Group, index: int, rep: int, row: TraceRow, trace: Trace) -> PromptSpec:
        """A trace row rebuilt from its hash_ids: one salt per (arm, rep) makes every block of
        the rep new to the server, and equal ids within the rep give equal blocks."""
        salt = self._prefix_salt(("hash_ids", rep))
        blocks = full_blocks(row, trace.block_tokens)
        text_seed = derive_seed(salt, "tail", group.name, index)
        return PromptSpec(
            max(row.input_tokens, MIN_PROMPT_TOKENS), "prose", "hash_ids", salt, text_seed,
            blocks=blocks, block_tokens=trace.block_tokens,
        )  # fmt: skip

    def prime(self, group: Group) -> PromptSpec:
        """The primed prefix alone: its text is exactly the prefix of the group's prompts."""
        full = self.spec(group, 0, 0)
        # A primed group's spec always has a prefix (its own or default_prefix_tokens) and seed.
        assert full.prefix_tokens is not None and full.prefix_seed is not None
        return PromptSpec(
            full.prefix_tokens,
            full.shape,
            "primed",
            full.salt,
            full.prefix_seed,
            full.prefix_key,
            full.prefix_tokens,
            full.prefix_seed,
            full.file,
        )

    def _prefix_salt(self, key: tuple[Any, ...]) -> str:
        if key not in self.prefixes:
            self.prefixes[key] = self.salts.next()
        return self.prefixes[key]


def draw_rows(group: Group, run_seed: int, n: int) -> list[DatasetRow]:
    """`n` rows of the group's dataset drawn with the run seed: a seeded permutation of the
    rows, then another while more are wanted (so a longer draw starts with a shorter one)."""
    d = group.prompt.dataset
    # Only a dataset group is drawn from.
    assert d is not None
    rng = random.Random(derive_seed(run_seed, "dataset", group.name))
    out: list[DatasetRow] = []
    while len(out) < n:
        out += rng.sample(d.rows, len(d.rows))
    return out[:n]


def _arm(arm: SweepArm, salts: _Salts, run_seed: int) -> ArmPlan:
    s = arm.scenario
    prompts = _Prompts(s, arm.name, salts, run_seed)
    warmup = tuple(_warmups(s, arm.name, salts))
    reps = tuple(_Rep(s, arm.name, rep, prompts).plan() for rep in range(s.repetitions))
    return ArmPlan(arm.name, dict(arm.flags), dict(arm.settings), s, warmup, reps)


def _request(
    s: Scenario, arm: str, group: Group, rep: int, index: int, offset_ns: int | None,
    prompt: PromptSpec, max_tokens: int, phase: str = "measure",
) -> PlannedRequest:  # fmt: skip
    rid = f"{arm}/{'warmup' if phase == 'warmup' else f'r{rep}'}/{group.name}/{index}"
    min_tokens = None if group.min_tokens is None else min(group.min_tokens, max_tokens)
    return PlannedRequest(
        rid, arm, group.name, rep, index, phase, offset_ns, prompt, max_tokens, min_tokens,
        group.ignore_eos, s.api, s.chat_template_kwargs, sampling=s.sampling,
    )  # fmt: skip


def _warmups(s: Scenario, arm: str, salts: _Salts) -> Iterator[PlannedRequest]:
    """Warmups are always salted, so they never warm a prefix the measured phase relies on."""
    for i, group in enumerate(_mix(s.groups, s.warmup.count)):
        tokens = max(s.warmup.tokens or group.prompt.tokens or 0, MIN_PROMPT_TOKENS)
        max_tokens = s.warmup.max_tokens or group.max_tokens or 1
        text_seed = derive_seed(s.seed, "warmup", group.name, i)
        file = str(group.prompt.file) if group.prompt.file else None
        # A dataset's rows are the measured prompts: its warmups are prose of a set size.
        shape = "prose" if group.prompt.dataset else group.prompt.shape
        prompt = PromptSpec(tokens, shape, "salted", salts.next(), text_seed, file=file)
        yield _request(s, arm, group, 0, i, None, prompt, max_tokens, "warmup")


# One request to plan: (offset, prompt tokens, max tokens); a None offset is a closed loop's
# (sent when a seat frees), None sizes are the group's.
_Row = tuple[int | None, int | None, int | None]


class _Rep:
    """One rep's requests under the scenario's arrival pattern."""

    def __init__(self, s: Scenario, arm: str, rep: int, prompts: _Prompts) -> None:
        self.s, self.arm, self.rep, self.prompts = s, arm, rep, prompts

    def plan(self) -> RepPlan:
        a = self.s.arrival
        rows: list[_Row]
        primes = tuple(self.prompts.prime(g) for g in self.s.groups if g.prompt.cache == "primed")
        if isinstance(a, Together | Staggered):
            sessions = tuple(self._sessions(a))
            return RepPlan(self.rep, self._from_starts(a), None, primes, None, sessions)
        if isinstance(a, Trace) and a.sharing == "hash_ids":
            return RepPlan(self.rep, self._trace_blocks(a), None, primes)
        if isinstance(a, Trace):
            rows = [(r.offset_ns, r.input_tokens, r.output_tokens) for r in a.rows]
            return RepPlan(self.rep, self._mixed(rows), None, primes)
        count = _count(self.s, a)
        if isinstance(a, Closed):
            rows = [(None, None, None)] * count
        else:
            rows = [(t, None, None) for t in arrival_offsets(a, self.s.seed, count)]
        duration = None if a.duration_s is None else round(a.duration_s * NS)
        if isinstance(a, Closed):
            return RepPlan(self.rep, self._mixed(rows), a.concurrency, primes, duration)
        return RepPlan(self.rep, self._mixed(rows), None, primes, duration, cap=a.concurrency)

    def _request(self, g: Group, i: int, offset: int | None, tokens: int | None = None,
                 out: int | None = None) -> PlannedRequest:  # fmt: skip
        spec = self.prompts.spec(g, i, self.rep, tokens)
        if g.prompt.dataset is not None:
            out = self.prompts.row(g, i).output_tokens
        # A group has no max_tokens only where its trace or dataset rows all give `out`.
        max_tokens = cast(int, out or g.max_tokens)
        return _request(self.s, self.arm, g, self.rep, i, offset, spec, max_tokens)

    def _sessions(self, a: Together | Staggered) -> Iterator[PlannedSession]:
        """Each session group's conversations, started like streams of a plain group."""
        step = a.interval_s if isinstance(a, Staggered) else 0.0
        for g in self.s.groups:
            for i in range(g.count if g.session or g.replays_turns else 0):
                offset = round((g.start_s + i * step) * NS)
                yield self._replay(g, i, offset) if g.replays_turns else self._session(g, i, offset)

    def _replay(self, g: Group, i: int, offset: int) -> PlannedSession:
        """A dataset conversation: its own user turns, each answer as long as the dataset's
        (or the group's max_tokens); the system prompt is the salt tag alone (salted) or empty
        (shared)."""
        row = self.prompts.row(g, i)
        system = self.prompts.row_spec(g, i, self.rep, "", g.prompt.cache)
        out = [row.answers[k] if row.output_tokens else g.max_tokens for k in range(len(row.turns))]
        template = _request(self.s, self.arm, g, self.rep, i, offset, system, cast(int, out[0]))
        turns = tuple(
            PlannedTurn(k, self.prompts.row_spec(g, i, self.rep, text, "session"), cast(int, n), 0)
            for k, (text, n) in enumerate(zip(row.turns, out, strict=True))
        )
        return PlannedSession(template.id, offset, system, turns, template)

    def _session(self, g: Group, i: int, offset: int) -> PlannedSession:
        cfg = g.session
        assert cfg is not None
        # Sessions start together or staggered, never from a trace: the group has max_tokens.
        max_tokens = cast(int, g.max_tokens)
        shape, file = g.prompt.shape, str(g.prompt.file) if g.prompt.file else None
        system = PromptSpec(
            cfg.system_tokens, shape, "salted", self.prompts.salts.next(),
            derive_seed(self.s.seed, "system", g.name, i, self.rep), file=file,
        )  # fmt: skip
        template = _request(self.s, self.arm, g, self.rep, i, offset, system, max_tokens)
        sid = template.id
        rng = np.random.default_rng(derive_seed(self.s.seed, "think", g.name, i, self.rep))
        turns, context = [], cfg.system_tokens
        for k in range(cfg.turns):
            context += cfg.user_tokens
            if cfg.max_context_tokens is not None and context > cfg.max_context_tokens:
                break
            seed = derive_seed(self.s.seed, "user", g.name, i, self.rep, k)
            # The user message is a tail of the conversation: no salt tag of its own.
            user = PromptSpec(cfg.user_tokens, shape, "session", "", seed, file=file)
            tool = None
            if cfg.tools is not None:
                # The call's answer and the tool's result come before the turn's own answer.
                context += max_tokens + cfg.tools.result_tokens
                if cfg.max_context_tokens is not None and context > cfg.max_context_tokens:
                    break
                rseed = derive_seed(self.s.seed, "tool", g.name, i, self.rep, k)
                result = PromptSpec(cfg.tools.result_tokens, shape, "session", "", rseed,
                                    file=file)  # fmt: skip
                tool = PlannedTool(round(cfg.tools.latency_s * NS), result)
            think = _think_ns(cfg, rng) if k else 0
            turns.append(PlannedTurn(k, user, max_tokens, think, tool))
            context += max_tokens
        return PlannedSession(sid, offset, system, tuple(turns), template)

    def _trace_blocks(self, a: Trace) -> tuple[PlannedRequest, ...]:
        """One request per trace row, its prompt rebuilt from the row's hash_ids."""
        seen: dict[str, int] = {}
        reqs = []
        for row, g in zip(a.rows, _mix(self.s.groups, len(a.rows)), strict=True):
            i = seen[g.name] = seen.get(g.name, -1) + 1
            spec = self.prompts.blocks(g, i, self.rep, row, a)
            req = _request(self.s, self.arm, g, self.rep, i, row.offset_ns, spec, row.output_tokens)
            if row.session is not None:
                req = replace(req, session=f"{req.arm}/r{self.rep}/{row.session}", turn=row.turn)
            reqs.append(req)
        return tuple(reqs)

    def _from_starts(self, a: Together | Staggered) -> tuple[PlannedRequest, ...]:
        """Each group's streams from its start: together, or `interval_s` apart."""
        step = a.interval_s if isinstance(a, Staggered) else 0.0
        reqs = [
            self._request(g, i, round((g.start_s + i * step) * NS))
            for g in self.s.groups
            if g.session is None and not g.replays_turns
            for i in range(g.count)
        ]
        # Every stream here got an offset above: only a closed loop's are None.
        return tuple(sorted(reqs, key=lambda r: cast(int, r.offset_ns)))

    def _mixed(self, rows: list[_Row]) -> tuple:
        """One request per row (offset, prompt tokens, max tokens), groups interleaved."""
        seen: dict[str, int] = {}
        reqs = []
        for (offset, tokens, out), g in zip(rows, _mix(self.s.groups, len(rows)), strict=True):
            i = seen[g.name] = seen.get(g.name, -1) + 1
            reqs.append(self._request(g, i, offset, tokens, out))
        return tuple(reqs)


def _think_ns(cfg: SessionConfig, rng: np.random.Generator) -> int:
    """The pause before a turn: `think_s`, or drawn exponential with that mean."""
    if cfg.think == "exponential" and cfg.think_s > 0:
        return round(rng.exponential(cfg.think_s) * NS)
    return round(cfg.think_s * NS)


def _count(s: Scenario, a: Closed | Poisson | Gamma) -> int:
    """Requests to plan: `count`; else a duration's cap; else one pass over the groups."""
    if a.count is not None:
        return a.count
    if isinstance(a, Closed) and a.duration_s is not None:
        return DURATION_REQUEST_CAP
    return sum(g.count for g in s.groups) if a.duration_s is None else -1


def arrival_offsets(a: Poisson | Gamma, seed: int, count: int) -> list[int]:
    """Send offsets (ns from the rep's start): the first at 0, then seeded gaps with mean
    1/rate (exponential, or gamma of shape `burstiness`); under a ramp, the gap before request
    i has the mean 1/rate_i of the ramp's rate for i. `count` < 0: until duration_s. With
    `exact_span`, bench's schedule: `count` gaps, the first request one gap in, scaled so the
    last arrives at count / rate.

    Gaps are unit draws times a scale, so one seed gives one sequence of draws whatever the
    rate: a flat ramp is the constant rate's schedule, and a ramp's gaps are that schedule's
    stretched request by request."""
    if not a.exact_span:
        return [round(t * NS) for t in _arrival_times(a, seed, count)]
    assert a.rate_per_s is not None and count > 0  # the schema's: a count and a rate
    ends = _arrival_times(a, seed, count + 1)[1:]
    scale = count / a.rate_per_s / ends[-1]
    return [round(t * scale * NS) for t in ends]


def _arrival_times(a: Poisson | Gamma, seed: int, count: int) -> list[float]:
    """arrival_offsets's draws in seconds, the first at 0."""
    rng = np.random.default_rng(derive_seed(seed, "arrival"))
    limit = None if a.duration_s is None else a.duration_s
    out: list[float] = [0.0]
    while count < 0 or len(out) < count:
        if isinstance(a, Gamma):
            unit = rng.gamma(a.burstiness, 1.0, _GAP_BLOCK)
        else:
            unit = rng.exponential(1.0, _GAP_BLOCK)
        times = out[-1] + np.cumsum(unit * _gap_scales(a, len(out), count))
        if limit is not None and times[-1] >= limit:
            out.extend(times[: int(np.searchsorted(times, limit))].tolist())
            break
        out.extend(times.tolist())
    if count >= 0:
        out = out[:count]
    if limit is not None:
        out = [t for t in out if t < limit]
    return out


def _gap_scales(a: Poisson | Gamma, first: int, count: int) -> float | np.ndarray:
    """The mean gap (gamma: the scale) before requests first, first + 1, ... of a block."""
    shape = a.burstiness if isinstance(a, Gamma) else 1.0
    if a.ramp is None:
        assert a.rate_per_s is not None  # the schema gives one of rate_per_s and ramp
        return 1.0 / (a.rate_per_s * shape) if isinstance(a, Gamma) else 1.0 / a.rate_per_s
    ramp = a.ramp
    # A ramp has a finite count (the schema asks one beside a duration); past it, no matter.
    rates = [ramp.rate_at(min(i, count - 1), count) for i in range(first, first + _GAP_BLOCK)]
    return 1.0 / (np.array(rates) * shape)


def _mix(groups: tuple[Group, ...], n: int) -> list[Group]:
    """`n` groups interleaved in proportion to their counts (smooth weighted round robin)."""
    total = sum(g.count for g in groups)
    current = [0] * len(groups)
    out = []
    for _ in range(n):
        for i, g in enumerate(groups):
            current[i] += g.count
        best = max(range(len(groups)), key=current.__getitem__)
        current[best] -= total
        out.append(groups[best])
    return out
