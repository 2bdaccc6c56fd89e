"""summary.json's run, groups, stream rows and histogram block as types: what a report reads of
them, read once from JSON.

summary.py writes summary.json (the contract other tools read); a report is drawn from that file
alone, so it reads it back through these types: the run's target, counts and server window; a
group's statistics per registered metric (analysis/registry.py), its verdict counts, what its
chunks carried, its ladder cohort and its reasoning; each stream's identity, verdict and times;
the HDR histogram files written beside it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, cast

from loadgen.analysis.added_ttft import AddedTtftBlock
from loadgen.analysis.baselines import Cap, PrefillBaseline
from loadgen.analysis.evidence import Evidence, read_evidence
from loadgen.analysis.lengths import PromptDrift, ShortOutput
from loadgen.analysis.phases import PhaseSummary
from loadgen.analysis.reuse import MeasuredReuse, PromptsRaised, RowsSkipped
from loadgen.analysis.selferror import ClientLimits
from loadgen.analysis.server_log import ServerLogWitness
from loadgen.analysis.timeline import Plateau
from loadgen.analysis.warmth import WarmCache
from loadgen.clock import ClockName
from loadgen.codec import from_json, json_field, reader
from loadgen.run_manifest import CacheCheck, UntilPrecise


@dataclass(frozen=True, slots=True)
class Stats:
    """analysis/stats.py's `describe` of one metric over a group's streams (None: no values)."""

    n: int = 0
    min: float | None = None
    median: float | None = None
    max: float | None = None
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None


@dataclass(frozen=True, slots=True)
class MinMax:
    """A figure's min, median and max over some reps' streams, and how many it had (a sweep's
    politeness row)."""

    min: float | None
    median: float | None
    max: float | None
    n: int


def read_stats(d: Mapping[str, Any] | None) -> Stats:
    """A metric's statistics; a metric no stream had (absent or null) has none."""
    return from_json(Stats, d or {})


@dataclass(frozen=True, slots=True)
class ChunkTally:
    """Content chunks whose token count the server gave, those with more than one, their tokens."""

    chunks: int = 0
    multi: int = 0
    tokens: int = 0


@dataclass(frozen=True, slots=True)
class Cohort:
    """A group's ladder row: its cohorts (one per rep) summarised over reps: `n` streams in a
    rep, at most `peak_decoding` of them decoding at one instant (a closed loop's seats, or
    fewer where the server's cap binds)."""

    n: int
    reps: int
    steady: int  # reps in which all n decoded at one instant
    per_stream_tok_s: float | None
    agg_tok_s: float | None
    agg_chunks_per_s: float | None
    agg_token_source: str
    kv_peak_perc: float | None
    duration_s: float | None
    preemptions: float | None
    peak_decoding: int


@dataclass(frozen=True, slots=True)
class Reasoning:
    """A group's reasoning figures: TTFO beside TTFT, reasoning and output decode rates apart,
    and where the reasoning token counts came from (estimated: not all the server's)."""

    streams: int
    ttfo_s: Stats
    reasoning_tokens: Stats
    reasoning_token_source: str
    estimated: bool
    reasoning_tok_s: Stats
    output_tok_s: Stats


@dataclass(frozen=True, slots=True)
class GroupStats:
    """A group's statistics of each registered metric that has them (analysis/registry.py's
    group_stats, in its order) and of the pooled gaps (GAP_METRICS), written flat among the
    group's keys by summary.py; a metric no stream had has none."""

    prompt_tokens: Stats = Stats()
    completion_tokens: Stats = Stats()
    tokens_per_chunk: Stats = Stats()
    late_s: Stats = Stats()
    ttft_intended_s: Stats = Stats()
    ttft_s: Stats = Stats()
    e2e_intended_s: Stats = Stats()
    e2e_s: Stats = Stats()
    decode_tok_s: Stats = Stats()
    chunks_per_s: Stats = Stats()
    tpot_s: Stats = Stats()
    itl_token_ms: Stats = Stats()
    itl_chunk_ms: Stats = Stats()


GROUP_STATS = frozenset(f.name for f in fields(GroupStats))


@dataclass(frozen=True, slots=True)
class GroupSummary:
    """One of summary.json's `groups`, under its name (the key it is written under)."""

    n: int
    ok: int
    token_source: str
    prompt_shape: str | None = None
    verdicts: Mapping[str, int] = field(default_factory=dict)
    chunk_tokens: ChunkTally = ChunkTally()
    cohort: Cohort | None = None
    reasoning: Reasoning | None = None
    stats: GroupStats = json_field(rest=True, default=GroupStats())
    name: str = json_field(omit="always", default="")

    def of(self, metric: str) -> Stats:
        """The group's statistics of a registered metric (KeyError names an unknown one)."""
        if metric not in GROUP_STATS:
            raise KeyError(metric)
        return cast(Stats, getattr(self.stats, metric))

    @property
    def multi_token(self) -> bool:
        """Some stream's chunks carried other than one token each (chunks/s != tok/s)."""
        return carried_other_than_one(self.of("tokens_per_chunk"))


def carried_other_than_one(tokens_per_chunk: Stats) -> bool:
    """Whether some stream's chunks carried other than one token each, from the statistics of
    its tokens per chunk."""
    tpc = tokens_per_chunk
    if not tpc.n or tpc.min is None or tpc.max is None:
        return False
    return tpc.max > 1.0 + 1e-9 or tpc.min < 1.0 - 1e-9


def read_groups(summary: Mapping[str, Any]) -> list[GroupSummary]:
    """A run summary's groups, in name order."""
    groups = from_json(dict[str, GroupSummary], summary.get("groups", {}))
    return [replace(g, name=name) for name, g in sorted(groups.items())]


def any_multi_token(groups: Iterable[GroupSummary]) -> bool:
    return any(g.multi_token for g in groups)


@dataclass(frozen=True, slots=True)
class RunTarget:
    """What a run talked to: its URL, its kind (sim, a launched kind, external) and its flags."""

    url: str | None = None
    kind: str | None = None
    # As run.json's TargetInfo wrote them: words, or numbers where a scenario's YAML gave a
    # flag's value as one (`--max-num-seqs 4`).
    written_flags: tuple[str | int | float | bool, ...] = json_field(key="flags", default=())

    @property
    def flags(self) -> tuple[str, ...]:
        """The flags as words, as a command line quotes them."""
        return tuple(str(f) for f in self.written_flags)


NO_TARGET = RunTarget()


def target_json(d: Any) -> Any:
    """A soak's or capacity search's target as RunTarget reads it: an older file's bare string
    (or none) as no target."""
    return d if isinstance(d, Mapping) else {}


@dataclass(frozen=True, slots=True)
class StreamTally:
    """The run's records: measured ones by status, and every record by phase."""

    measure: int
    ok: int
    error: int
    by_phase: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RecordTally:
    """summary.json's `records`: measured of planned, and every line or field that was lost."""

    planned: int | None
    measured: int
    missing: int | None
    unreadable_lines: int = 0
    repeated_lines: int = 0
    unreadable_metrics_lines: int = 0
    dropped_manifest_fields: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Gauge:
    """A /metrics gauge over the window: its peak, and its longest plateau."""

    max: float | None = None
    plateau: Plateau | None = None


@dataclass(frozen=True, slots=True)
class Span:
    """The measured window a server window covers (s from run start)."""

    duration_s: float
    from_s: float | None = None
    to_s: float | None = None


@dataclass(frozen=True, slots=True)
class ServerWindow:
    """aggregate.server_window over the measured phase; `note` says why it is unavailable."""

    available: bool
    note: str = ""
    window: Span | None = None
    polled: Span | None = None
    polls: int = 0
    poll_interval_s: float | None = None
    kv_peak_perc: float | None = None
    preemptions: float | None = None
    running: Gauge = Gauge()
    waiting: Gauge = Gauge()
    prefix_hit_rate: float | None = None
    generation_tokens: float | None = None
    generation_tok_s: float | None = None
    spec_acceptance: float | None = None
    spec_emitted_per_step: float | None = None
    tokens_per_step: float | None = None

    @property
    def duration_s(self) -> float | None:
        return None if self.window is None else self.window.duration_s


NO_SERVER_WINDOW = ServerWindow(False, "no server metrics")


@dataclass(frozen=True, slots=True)
class ServerFacts:
    """summary.json's run.server_facts (run.json's `server`): the server's limits known by name,
    written flat beside where each came from (`sources`: "user" for --server-facts, "flags",
    "metrics", "sim"), the source of the cap and why any limit stayed unknown."""

    sources: Mapping[str, str] = field(default_factory=dict)
    source: str | None = None
    unknown: Mapping[str, str] = field(default_factory=dict)
    facts: Mapping[str, Any] = json_field(rest=True, default_factory=dict)

    @property
    def user_facts(self) -> tuple[tuple[str, int], ...]:
        """The limits the user stated of an external server (--server-facts), by name."""
        return tuple((k, self.facts[k]) for k, src in sorted(self.sources.items()) if src == "user")

    @property
    def speculative_tokens(self) -> int | None:
        """The drafter's tokens per step, whoever stated them."""
        return cast(int | None, self.facts.get("num_speculative_tokens"))


@dataclass(frozen=True, slots=True)
class RunSummary:
    """summary.json's `run`, or a sweep parent's (which has no counts, cap or server window)."""

    scenario: str | None = None
    # None written (run.json named no target) is none named, as no key is.
    target: RunTarget = json_field(default=NO_TARGET, null_is_default=True)
    model: str | None = None
    seed: int | None = None
    seed_source: str | None = None
    clock: ClockName = ClockName.WALL  # none written: the wall's (ClockName.read)
    speed: float | None = 1.0
    token_counter: str | None = None
    interrupted: bool = False
    client_limited: bool = False
    # A run's own, or (a sweep parent's) each client-limited arm's, by arm name.
    client_limits: ClientLimits | None = None
    arm_client_limits: Mapping[str, ClientLimits] = field(default_factory=dict)
    warm_cache: WarmCache | None = None
    short_output: ShortOutput | None = None
    prompt_drift: PromptDrift | None = None
    # Each primed rep's check that its prefix was warm before it was measured.
    cache_checks: tuple[CacheCheck, ...] = ()
    streams: StreamTally | None = None
    wall_s: float | None = None
    cap: Cap | None = None
    prefill_baseline: PrefillBaseline | None = None
    records: RecordTally | None = None
    boots_per_arm: int | None = None
    boots_note: str | None = None
    server: ServerWindow = NO_SERVER_WINDOW
    server_facts: ServerFacts = ServerFacts()
    trace_reuse: MeasuredReuse | None = None
    trace_prompts_raised: PromptsRaised | None = None
    trace_rows_skipped: RowsSkipped | None = None
    added_ttft: AddedTtftBlock | None = None
    server_log: ServerLogWitness | None = None
    until_precise: UntilPrecise | None = None
    http_phases: PhaseSummary | None = None


def read_run(summary: Mapping[str, Any]) -> RunSummary:
    """A run summary's (or a sweep parent's) `run`."""
    return from_json(RunSummary, summary.get("run") or {})


@dataclass(frozen=True, slots=True)
class StreamRow:
    """One row of summary.json's `streams` as a report reads it: who the stream is, how it
    ended, its verdict, its times in s from run start (t_admit_s: its modelled admission) and
    the registry's per-stream figures the report draws. The evidence stays raw until asked
    for: a 20,000-stream trace reads every row, and lists or draws few of them."""

    id: str
    group: str
    rep: int
    phase: str
    status: str
    session: str | None
    turn: int | None
    verdict: str
    evidence: Mapping[str, Any]
    ttft_s: float | None
    decode_tok_s: float | None
    prompt_tokens: int | None
    t_intended_s: float
    t_sent_s: float | None
    t_admit_s: float | None
    t_first_s: float | None
    t_last_s: float | None
    t_done_s: float | None

    @property
    def typed_evidence(self) -> Evidence:
        return read_evidence(self.verdict, self.evidence)


def read_stream_rows(summary: Mapping[str, Any]) -> list[StreamRow]:
    """A run summary's streams in its order (by intended send time)."""
    read = reader(StreamRow)
    return [read(s) for s in summary["streams"]]


@dataclass(frozen=True, slots=True)
class HistBlock:
    """summary.json's `hist`: the HDR histogram files written beside it, their unit and range,
    and per group the values of each metric that fell outside the range (not recorded)."""

    unit: str
    range_us: tuple[int, int]  # lowest, highest
    files: tuple[str, ...]
    out_of_range: Mapping[str, Mapping[str, int]]
