"""run.json, declared once: `RunManifest` is what every run directory's manifest holds (an arm's
run, a sweep's, a capacity search's, a calibration's or a fidelity comparison's parent), written
and read only through the codec (codec.py), so the file's shape is this class's fields.

An arm's run owns its manifest: the head (engine/manifest.py), then the parts the target, the
clock's backend and the soak's stop return, each added with `add` (a new value; nothing shares a
dict to mutate). A key a kind of run does not have is left out of the file (omit "none"), except
`slo`, written as null where no SLO was given. Readers of older run directories: a bare-URL
`target` (early `loadgen request`) reads as that string; a missing `clock` is the wall's (wall
runs did not write it before every run did).

Parts whose shape is another module's open record (the resolved scenario, server facts by name,
a launch's boot record, the client's lag and worker figures) are carried as JSON objects.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from loadgen.clock import ClockName
from loadgen.codec import CodecError, from_json, json_field, to_json
from loadgen.redact import redact

Json = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ArmInfo:
    """An arm of the plan: its name, its server flags and its scenario settings."""

    name: str
    flags: Json
    settings: Json


@dataclass(frozen=True, slots=True)
class TargetInfo:
    """The server the arm's requests went to: its URL, its kind ("sim", "vllm", ..., or
    "external"), the flags it was launched with and its boot log (relative to the run)."""

    url: str
    kind: str
    # Words, or numbers where a scenario's YAML gave a flag's value as one (`--max-num-seqs 4`).
    flags: tuple[str | int | float | bool, ...] = ()
    boot_log: str | None = None


@dataclass(frozen=True, slots=True)
class ProfileRef:
    """A fitted sim profile file: its path, name and content digest (a file can be refitted in
    place; the digest says which fit ran)."""

    path: str
    name: str
    sha256: str | None = json_field(omit="none", default=None)


@dataclass(frozen=True, slots=True)
class VirtualEnd:
    """Where the virtual clock stopped, and the engine steps the sim took to get there."""

    end_ns: int
    engine_steps: int


@dataclass(frozen=True, slots=True)
class TelemetryInfo:
    """Which GPU telemetry source sampled the run (None: none did), and why not."""

    source: str | None
    notes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SoakEndInfo:
    """How a soak stopped sending: the reason, its detail and when (s of the run's clock)."""

    reason: str | None
    detail: str | None
    at_s: float | None
    duration_s: float | None


@dataclass(frozen=True, slots=True)
class FidelityRun:
    """A fidelity directory's run.json block: the scenario, the tolerance, the two runs' dirs
    (relative to the fidelity directory; None until that run ended) and the profile judged."""

    scenario: str
    tolerance: float
    real: str | None
    virtual: str | None
    profile: ProfileRef


@dataclass(frozen=True, slots=True)
class Precision:
    """Where one target stands after n values: the estimate, its interval and the margin it
    reached (None while n is too small for an interval, or the estimate is 0)."""

    target: str
    goal: float
    n: int
    estimate: float | None
    low: float | None
    high: float | None
    margin: float | None

    @property
    def reached(self) -> bool:
        return self.margin is not None and self.margin <= self.goal


@dataclass(frozen=True, slots=True)
class UntilPrecise:
    """How `--until-precise` ended, in run.json and summary.json: whether every target came
    within its margin, and each target's standing then (the n it took, the margin reached)
    or, never reached, at the plan's end; `measured` the measured streams recorded by then
    (those in flight at the stop finish and are recorded after it) of the `planned` bound
    (None: a duration bounds the plan)."""

    reached: bool
    measured: int
    planned: int | None
    targets: tuple[Precision, ...]


@dataclass(frozen=True, slots=True)
class ReplicaTargets:
    """The replicas an arm routed to (a record's `replica` indexes `urls`, redacted) and the
    route: its policy and the prefix-hash settings (client/routing.py)."""

    urls: tuple[str, ...]
    route: str
    prefix_blocks: int
    block_chars: int


@dataclass(frozen=True, slots=True)
class ServerLogInfo:
    """The server's log kept beside the records (engine/server_log.py): the file in the run
    directory (None: it could not be read, `error` says why), where it came from, the byte it
    was read from and how many bytes were kept."""

    file: str | None
    source: str
    from_byte: int
    bytes: int | None = json_field(omit="none", default=None)
    error: str | None = json_field(omit="none", default=None)


@dataclass(frozen=True, slots=True)
class TargetPart:
    """What a target (a URL, or a server launched for the run) tells run.json."""

    target: TargetInfo
    server: Json  # the limits known by name, their sources, and why any stayed unknown
    speed: float
    launch: Json | None  # a launched server's boot record


@dataclass(frozen=True, slots=True)
class BackendPart:
    """What a clock's arm backend tells run.json at the end of the arm."""

    clock: ClockName
    client: Json
    server_info: Json
    run_start_perf_ns: int | None = None
    telemetry: TelemetryInfo | None = None
    virtual: VirtualEnd | None = None
    # The run clock's zero on the wall and the host's zone (a server log's local stamps).
    run_start_wall_ns: int | None = None
    utc_offset_s: int | None = None
    targets: ReplicaTargets | None = None
    server_log: ServerLogInfo | None = None


CacheVerdict = Literal["healthy", "dead", "mismatch", "inconclusive"]


@dataclass(frozen=True, slots=True)
class CacheCheck:
    """A primed prefix's check that the cache is warm before a rep is measured (engine/cache.py
    judges it); run.json holds one per primed rep."""

    group: str
    rep: int
    prefix_key: str
    probe_tokens: int
    block_size: int | None
    block_size_source: str | None
    cold_ttft_s: float | None
    warm_ttft_s: float | None
    hits_delta: float | None
    # Reuse shown (healthy or mismatch): a primed group's prefix counts as cached.
    warm: bool
    reason: str
    verdict: CacheVerdict = "dead"
    # "counters", "ttft", "failed" (a stream failed), "blind" (probe too small) or "none".
    decided_by: str = "ttft"
    floor_ttft_s: float | None = None
    answers_match: bool | None = None


@dataclass(frozen=True, slots=True)
class RunManifest:
    """run.json (DESIGN.md's run directory): every field a kind of run may write."""

    # The head, the same for every command (engine/manifest.py).
    tool_version: str | None = json_field(omit="none", default=None)
    # the resolved scenario (scenario_to_json)
    scenario: Json | None = json_field(omit="none", default=None)
    seed: int | None = json_field(omit="none", default=None)
    seed_source: str | None = json_field(omit="none", default=None)
    started_wall: str | None = json_field(omit="none", default=None)
    host: str | None = json_field(omit="none", default=None)
    python: str | None = json_field(omit="none", default=None)
    slo: Mapping[str, float] | None = None
    slo_shares: Mapping[str, float] | None = json_field(omit="none", default=None)
    # --metric-percentiles: the percentiles every summary adds (None: not asked)
    metric_percentiles: tuple[float, ...] | None = json_field(omit="none", default=None)
    sim_profile: ProfileRef | None = json_field(omit="none", default=None)
    clock: ClockName = json_field(default=ClockName.WALL)
    # An arm's run.
    arm: ArmInfo | None = json_field(omit="none", default=None)
    # a sweep's boot this arm ran on (engine/boots.py)
    boot: Json | None = json_field(omit="none", default=None)
    interrupted: bool | None = json_field(omit="none", default=None)
    # None: open-ended (a soak)
    planned_streams: int | None = json_field(omit="none", default=None)
    cache_checks: tuple[CacheCheck, ...] | None = json_field(omit="none", default=None)
    model: str | None = json_field(omit="none", default=None)
    token_counter: str | None = json_field(omit="none", default=None)
    prompt_shapes: Mapping[str, str] | None = json_field(omit="none", default=None)
    # a bare URL in early `loadgen request` runs
    target: TargetInfo | str | None = json_field(omit="none", default=None)
    # the server's limits by name, with their sources
    server: Json | None = json_field(omit="none", default=None)
    speed: float | None = json_field(omit="none", default=None)
    # a launched server's boot record
    launch: Json | None = json_field(omit="none", default=None)
    client: Json | None = json_field(omit="none", default=None)
    server_info: Json | None = json_field(omit="none", default=None)
    # the wall clock's zero, in perf_counter_ns
    run_start_perf_ns: int | None = json_field(omit="none", default=None)
    telemetry: TelemetryInfo | None = json_field(omit="none", default=None)
    virtual: VirtualEnd | None = json_field(omit="none", default=None)
    run_start_wall_ns: int | None = json_field(omit="none", default=None)
    utc_offset_s: int | None = json_field(omit="none", default=None)
    # several replicas: their URLs and the route (a record's `replica` indexes `urls`)
    targets: ReplicaTargets | None = json_field(omit="none", default=None)
    # --server-log: the server's log lines kept as server.log
    server_log: ServerLogInfo | None = json_field(omit="none", default=None)
    soak_end: SoakEndInfo | None = json_field(omit="none", default=None)
    # a soak's --until-precise targets (metric_pNN=margin), which close each of its windows
    soak_precise: tuple[str, ...] | None = json_field(omit="none", default=None)
    # --until-precise: whether every target came within its margin, and where each stood
    until_precise: UntilPrecise | None = json_field(omit="none", default=None)
    error: str | None = json_field(omit="none", default=None)
    finished_wall: str | None = json_field(omit="none", default=None)
    # A sweep's parent.
    arms: tuple[ArmInfo, ...] | None = json_field(omit="none", default=None)
    boots_per_arm: int | None = json_field(omit="none", default=None)
    boots_note: str | None = json_field(omit="none", default=None)
    server_kind: str | None = json_field(omit="none", default=None)
    boots: tuple[Json, ...] | None = json_field(omit="none", default=None)
    # A capacity search's or a calibration's parent.
    capacity: Json | None = json_field(omit="none", default=None)
    calibrate: Json | None = json_field(omit="none", default=None)
    # Its runs in the order they ran, one directory each: a search's steps (one load each), a
    # calibration's points; `probes` in a directory written before either had its own name.
    runs: tuple[Json, ...] | None = json_field(omit="none", default=None, legacy=("probes",))
    stopped_by: str | None = json_field(omit="none", default=None)
    fit: Json | None = json_field(omit="none", default=None)
    profile: str | None = json_field(omit="none", default=None)
    # A tune's directory (engine/tune.py): the grid, its points so far, the verified arms.
    tune: Json | None = json_field(omit="none", default=None)
    # A fidelity comparison's parent.
    fidelity: FidelityRun | None = json_field(omit="none", default=None)

    def add(self, *parts: TargetPart | BackendPart, **fields: Any) -> RunManifest:
        """This manifest with each part's fields, then `fields` (values by name), set."""
        for part in parts:
            fields = {f.name: getattr(part, f.name) for f in dataclasses.fields(part)} | fields
        return dataclasses.replace(self, **fields)

    @property
    def scenario_name(self) -> str | None:
        name = (self.scenario or {}).get("name")
        return name if isinstance(name, str) else None


def write_manifest(folder: Path, manifest: RunManifest) -> None:
    """Writes run.json atomically (a reader never sees half a manifest)."""
    tmp = folder / "run.json.tmp"
    # Redacted here, where every run.json is written: no secret reaches the disk (issue 20).
    options = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
    tmp.write_bytes(orjson.dumps(redact(to_json(manifest)), option=options))
    tmp.replace(folder / "run.json")


def read_run_manifest(data: Any) -> tuple[RunManifest, tuple[str, ...]]:
    """Parsed run.json as a RunManifest, and each top-level field dropped for a value its type
    does not take, as `field (why)`: one wrong field costs that field, not the report."""
    if not isinstance(data, dict):
        raise CodecError(f"expected object, got {type(data).__name__}")
    data, dropped = dict(data), list[str]()
    while True:
        try:
            return from_json(RunManifest, data), tuple(sorted(dropped))
        except CodecError as exc:
            if not exc.path or exc.path[0] not in data:
                raise
            key, inner = exc.path[0], ".".join(exc.path[1:])
            del data[key]
            dropped.append(f"{key} ({inner + ': ' if inner else ''}{exc.what})")
