"""The options the run-like commands share (run, soak, capacity, calibrate, fidelity, request,
probe-cache), each group declared once and handed to the command as one typed value, and
`run_options`, the one place they become `RunOptions`: what a run talks to (a URL, a launched
server or the virtual clock), its seed, where it writes. A usage mistake is caught there,
before anything is loaded or sent, and every one found is said at once (exit 2)."""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import click

from loadgen.analysis.precision import PRECISE_HELP, PrecisionTarget, parse_precise
from loadgen.analysis.slo import DEFAULT_ATTAIN, SLO_HELP, SloItem, parse_slo
from loadgen.client.endpoint import resolve_target
from loadgen.client.routing import (
    DEFAULT_BLOCK_CHARS,
    DEFAULT_PREFIX_BLOCKS,
    RoutePolicy,
    RouteSpec,
)
from loadgen.clock import ClockName
from loadgen.engine.seeds import SEED_TYPE, resolve_run_seed
from loadgen.scenario.limits import client_problems, size_problems
from loadgen.scenario.load_axis import LoadAxis, load_problem, load_sweep, parse_load_values
from loadgen.scenario.model import API_KINDS, Gamma, Poisson, Scenario
from loadgen.server.kinds import SERVER_KINDS
from loadgen.server.user_facts import USER_SOURCE, parse_server_facts, parse_server_flags
from loadgen.sim.profile_file import ProfileFileError, load_profile_file

if TYPE_CHECKING:
    # Imported where used: they bring aiohttp, and `loadgen request --help` needs neither.
    from loadgen.engine.options import RunOptions
    from loadgen.server.spec import ServerSpec

F = TypeVar("F", bound=Callable[..., Any])


def _options(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    """Several click options as one decorator, applied in the order written."""

    def apply(f: F) -> F:
        for decorator in reversed(decorators):
            f = decorator(f)
        return f

    return apply


class _OldSpellingsHidden(click.Option):
    """A renamed option: every spelling parses (scripts keep the old one) and --help shows
    only the first, the name to use."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        shown = copy.copy(self)
        shown.opts = self.opts[:1]
        return click.Option.get_help_record(shown, ctx)


def renamed_option(name: str, *old: str, **kwargs: Any) -> Callable[[F], F]:
    """click.option(name, ...) that still takes each `old` spelling, unlisted in --help."""
    dest = name.lstrip("-").replace("-", "_")
    return click.option(name, *old, dest, cls=_OldSpellingsHidden, **kwargs)


def option_group(
    name: str, build: Callable[..., Any], *options: Callable[[F], F]
) -> Callable[[F], F]:
    """`options` as one decorator whose values reach the command as one argument,
    `name=build(**values)` (values by the options' parameter names)."""

    def apply(command: F) -> F:
        names: list[str] = []
        f: Any = _packed(command, name, build, names)
        before = len(getattr(f, "__click_params__", []))
        f = _options(*options)(f)
        names += [p.name for p in f.__click_params__[before:]]
        return cast(F, f)

    return apply


def _packed(command: F, name: str, build: Callable[..., Any], names: list[str]) -> F:
    """`command` called with the keyword arguments `names` taken out as `name=build(**them)`
    (a name no option of this command declares is left to build's default)."""

    @functools.wraps(command)
    def packed(*args: Any, **kwargs: Any) -> Any:
        values = {n: kwargs.pop(n) for n in names if n in kwargs}
        return command(*args, **{name: build(**values)}, **kwargs)

    return cast(F, packed)


class Problems(click.UsageError):
    """Every usage mistake the options hold, one `Error:` line each (exit 2)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems

    def format_message(self) -> str:
        return "\nError: ".join(self.problems)


@dataclass(frozen=True, slots=True)
class TargetArgs:
    """What to load: servers by URL (none: the built-in sim, or --server's; several: replicas
    behind the client's router), the key, the model, the route and the sim's replicas."""

    base_urls: tuple[str, ...] = ()
    api_key: str | None = None
    model: str | None = None
    route: str = str(RoutePolicy.ROUND_ROBIN)
    route_prefix_blocks: int = DEFAULT_PREFIX_BLOCKS
    route_block_chars: int = DEFAULT_BLOCK_CHARS
    sim_replicas: int = 1

    @property
    def base_url(self) -> str | None:
        """The first URL (the one server, or the replica whose model and window stand for all)."""
        return self.base_urls[0] if self.base_urls else None

    @property
    def route_spec(self) -> RouteSpec:
        return RouteSpec(RoutePolicy(self.route), self.route_prefix_blocks, self.route_block_chars)


# A fleet a 2-core box can still boot and route; a real cluster's replicas come by URL.
MAX_SIM_REPLICAS = 64

TARGET_OPTIONS = option_group(
    "target",
    TargetArgs,
    click.option(
        "--base-url",
        "base_urls",
        envvar="OPENAI_BASE_URL",
        multiple=True,
        help="Server to load, with or without /v1 (a run without it boots the built-in sim). "
        "Repeat it for replicas of one model behind the client's router (--route; run, soak "
        "and capacity). Env: OPENAI_BASE_URL (several: space-separated).",
    ),
    click.option("--api-key", envvar="OPENAI_API_KEY", default=None, help="Env: OPENAI_API_KEY."),
    click.option("--model", default=None, help="Model name (default: the server's first)."),
    click.option(
        "--route",
        type=click.Choice([str(p) for p in RoutePolicy]),
        default=str(RoutePolicy.ROUND_ROBIN),
        show_default=True,
        help="How several replicas (repeated --base-url, or --sim-replicas) share the requests: "
        "round-robin, least-outstanding (fewest streams in flight), session-affinity (a "
        "session's turns to one replica), prefix-hash (the first K blocks of the prompt). "
        "Each client worker (--workers, --ray) routes its own share with a router of its own.",
    ),
    click.option(
        "--route-prefix-blocks",
        type=click.IntRange(1, 4096),
        default=DEFAULT_PREFIX_BLOCKS,
        show_default=True,
        help="prefix-hash: K, the leading blocks of the prompt hashed.",
    ),
    click.option(
        "--route-block-chars",
        type=click.IntRange(1, 1 << 20),
        default=DEFAULT_BLOCK_CHARS,
        show_default=True,
        help="prefix-hash: a block's size in characters (the client does not tokenize).",
    ),
    click.option(
        "--sim-replicas",
        type=click.IntRange(1, MAX_SIM_REPLICAS),
        default=1,
        show_default=True,
        help="Boot the built-in sim N times behind the --route policy, each with its own KV "
        "cache and metrics (either clock; on the wall clock N sims on 127.0.0.1 ports).",
    ),
)


@dataclass(frozen=True, slots=True)
class FactsArgs:
    """What a server loadgen did not launch cannot report of itself, as the user wrote it."""

    server_facts: tuple[str, ...] = ()
    server_flags: tuple[str, ...] = ()
    server_log: Path | None = None


FACTS_OPTIONS = option_group(
    "facts",
    FactsArgs,
    click.option(
        "--server-facts",
        "server_facts",
        multiple=True,
        metavar="KEY=N[,KEY=N]",
        help="Known limits of an external server, e.g. max_num_seqs=4,max_num_batched_tokens="
        "512 (verdicts label them 'user').",
    ),
    click.option(
        "--server-flags",
        "server_flags",
        multiple=True,
        metavar="FLAGS",
        help="The flags an external server was launched with, recorded in run.json and reports.",
    ),
    click.option(
        "--server-log",
        "server_log",
        type=click.Path(path_type=Path),
        default=None,
        metavar="FILE",
        help="The external server's log, as it is being written (on this host): the lines it "
        "writes during the run are kept as server.log and its engine lines read as a witness "
        "beside /metrics (a launched server's own log is read without it).",
    ),
)


@dataclass(frozen=True, slots=True)
class TelemetryArgs:
    telemetry_url: str | None = None
    no_telemetry: bool = False


TELEMETRY_OPTIONS = option_group(
    "telemetry",
    TelemetryArgs,
    click.option(
        "--telemetry",
        "telemetry_url",
        default=None,
        metavar="URL",
        help="A DCGM exporter's /metrics to sample GPU power, energy and clocks from (a remote "
        "server); without it NVML is sampled where the server is on this host.",
    ),
    click.option(
        "--no-telemetry", is_flag=True, help="Do not sample this host's GPUs through NVML."
    ),
)


@dataclass(frozen=True, slots=True)
class OutputArgs:
    out_root: Path = Path("runs")
    progress: bool = True


def output_options(progress: bool) -> Callable[[F], F]:
    """--out and --progress; `progress`: whether the live view is on by default (off for the
    commands whose lines on stderr are their progress)."""
    return option_group(
        "output",
        OutputArgs,
        click.option(
            "--out",
            "out_root",
            type=click.Path(path_type=Path),
            default=Path("runs"),
            show_default=True,
            help="Folder that receives the run directory.",
        ),
        click.option("--progress/--no-progress", default=progress, show_default=True),
    )


SET_OPTION = click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a scenario field, e.g. --set groups.minnows.count=7.",
)


@dataclass(frozen=True, slots=True)
class SeedArgs:
    run_seed: int | None = None
    replay: Path | None = None


SEED_OPTIONS = option_group(
    "seed",
    SeedArgs,
    click.option(
        "--seed",
        "run_seed",
        type=SEED_TYPE,
        default=None,
        help="Run seed for salts (default: a fresh one per run; recorded in run.json).",
    ),
    click.option(
        "--replay",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Reuse the run seed (so the salts) a run recorded in RUN_DIR/run.json.",
    ),
)


def parse_clock(
    _ctx: click.Context, _param: click.Parameter, value: str | None
) -> ClockName | None:
    """`--clock`'s word as the type every stage carries (None: not given, run_options picks)."""
    return None if value is None else ClockName(value)


def parse_percentiles(
    _ctx: click.Context, _param: click.Parameter, value: str | None
) -> tuple[float, ...] | None:
    """`--metric-percentiles 50,95,99.9` as the percentiles, in the order given (None: not
    given, the summary keeps today's figures)."""
    if value is None:
        return None
    try:
        ps = tuple(dict.fromkeys(float(p) for p in value.split(",")))
    except ValueError:
        ps = ()
    if not ps or not all(0 <= p <= 100 for p in ps):
        raise click.BadParameter(f"{value!r}: give numbers in [0, 100] separated by commas, "
                                 "e.g. 50,95,99.9")  # fmt: skip
    return ps


METRIC_PERCENTILES_OPTION = click.option(
    "--metric-percentiles",
    callback=parse_percentiles,
    default=None,
    metavar="P[,P...]",
    help="Also report TTFT, TPOT, ITL and E2E at these percentiles (ms, read from the HDR "
    "histograms) per group in summary.json and the report, as vllm bench serve's "
    "--metric-percentiles.",
)
# ClockName's values, not the enum: click would offer its member names (WALL).
CLOCK_CHOICE = click.Choice([c.value for c in ClockName])
CLOCK_OPTION = click.option(
    "--clock",
    type=CLOCK_CHOICE,
    callback=parse_clock,
    default=None,
    help="virtual: the built-in sim's engine on a discrete-event clock, no HTTP (exact, "
    "repeatable, faster than real time); wall: real time over HTTP (default: wall; a soak of "
    "the built-in sim: virtual, an hour in seconds).",
)
STRICT_OPTION = click.option(
    "--strict",
    is_flag=True,
    help="Exit 3 when any stream was client_limited (loadgen's own error above tolerance).",
)
# Requests per load value, for a load sweep's arms and a capacity search's steps alike.
REQUESTS_OPTION = click.option(
    "--requests",
    type=click.IntRange(min=1),
    default=None,
    help="Requests per load value (default: the arrival's count, else at least 32, 4 per "
    "seat or 10 s of arrivals).",
)


# Default search ranges: seats from one user to 256; a rate from 0.5 to 64 requests/s.
DEFAULT_LOAD_RANGE = {"concurrency": (1.0, 256.0), "rate": (0.5, 64.0)}
# The range a search over --over's load covers (capacity's, and tune's --objective capacity).
LOAD_RANGE_OPTIONS = _options(
    click.option("--min", "lo", type=float, default=None, help="Lowest load (default 1 or 0.5/s)."),
    click.option(
        "--max", "hi", type=float, default=None, help="Highest load (default 256 or 64/s)."
    ),
)


def load_range(over: str, lo: float | None, hi: float | None) -> tuple[float, float]:
    """--min and --max for a search `over` concurrency or rate, defaults filled in; a usage
    error when either is no load of that axis or they are the wrong way round."""
    d_lo, d_hi = DEFAULT_LOAD_RANGE[over]
    lo, hi = d_lo if lo is None else lo, d_hi if hi is None else hi
    whole = over == "concurrency"
    for flag, v in (("--min", lo), ("--max", hi)):
        if not math.isfinite(v) or v <= 0 or (whole and not float(v).is_integer()):
            kind = "a whole number >= 1" if whole else "a finite rate > 0"
            raise click.UsageError(f"{flag} {v:g}: expected {kind}")
    if lo > hi:
        raise click.UsageError(f"--min {lo:g} is above --max {hi:g}")
    return lo, hi


@dataclass(frozen=True, slots=True)
class LoadSweepArgs:
    """--concurrency or --rate (one arm per value, as written), --max-concurrency and
    --requests (with_load_sweep)."""

    concurrency: str | None = None
    rate: str | None = None
    max_concurrency: int | None = None
    requests: int | None = None


# A load sweep from the command line, as `vllm bench serve` users run one: one arm per value on
# one server boot (scenario/load_axis.py says what each value sets).
LOAD_SWEEP_OPTIONS = option_group(
    "load",
    LoadSweepArgs,
    click.option(
        "--concurrency",
        default=None,
        metavar="N[,N...]",
        help="One arm per value: a closed loop with N requests in flight.",
    ),
    click.option(
        "--rate",
        default=None,
        metavar="R[,R...]",
        help="One arm per value: Poisson arrivals at R requests/s (inf: all at once).",
    ),
    click.option(
        "--max-concurrency",
        type=click.IntRange(min=1),
        default=None,
        metavar="N",
        help="At most N streams in flight under a rate (each --rate arm, or the scenario's "
        "poisson/gamma arrival): an arrival waits for a free seat, its wait recorded apart "
        "from its TTFT.",
    ),
    REQUESTS_OPTION,
)
SIM_PROFILE_OPTION = click.option(
    "--sim-profile",
    "sim_profile",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Run the built-in sim as a calibrated server: a profile file from `loadgen "
    "calibrate` (its step costs and limits; the scenario's sim: block gives way to it, a "
    "sweep's flags and --set sim.* do not).",
)


@dataclass(frozen=True, slots=True)
class LaunchArgs:
    """What the launch options said, before --model is known (fields: the options' names)."""

    server_kind: str | None = None
    server_args: tuple[str, ...] = ()
    model_path: Path | None = None
    server_python: Path | None = None
    server_bin: Path | None = None
    boot_timeout_s: float | None = None

    def spec(self, model: str | None) -> ServerSpec | None:
        """The server to launch (None: none asked for); see server_spec."""
        return server_spec(self.server_kind, self.server_args, self.model_path, model=model,
                           python=self.server_python, bin=self.server_bin,
                           boot_timeout_s=self.boot_timeout_s)  # fmt: skip


# --server and how to start it: every command that launches a server.
LAUNCH_OPTIONS = option_group(
    "launch",
    LaunchArgs,
    click.option(
        "--server",
        "server_kind",
        type=click.Choice(SERVER_KINDS),
        default=None,
        help="Launch this server on a free loopback port (per boot in a sweep).",
    ),
    click.option(
        "--server-arg",
        "server_args",
        multiple=True,
        metavar="ARG",
        help="A flag for the launched server, repeatable: --server-arg=--max-num-seqs=4.",
    ),
    click.option(
        "--model-path",
        type=click.Path(path_type=Path),
        default=None,
        help="Model the launched server serves (or --model NAME: one in the server's cache).",
    ),
    click.option(
        "--server-python",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="The Python that has vLLM or SGLang installed (default: `vllm`/`sglang` on "
        "PATH, then this environment).",
    ),
    click.option(
        "--server-bin",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="The server's executable (vllm, sglang, llama-server) to launch.",
    ),
    click.option(
        "--boot-timeout",
        "boot_timeout_s",
        type=click.FloatRange(min=1),
        default=None,
        help="Seconds a launched server may take to serve (default per kind and build: vLLM "
        "CPU 240, GPU 900; SGLang 900; llama.cpp 60).",
    ),
)


@dataclass(frozen=True, slots=True)
class ProfiledArgs:
    """A scenario and the fitted profile that predicts it on the virtual clock: what fidelity
    and tune run on the server and on the sim."""

    scenario: str
    sim_profile: Path

    def scenarios(
        self, overrides: tuple[str, ...], extra: tuple[str, ...] = ()
    ) -> tuple[Scenario, Scenario]:
        """The scenario as the server runs it (--set, then `extra`) and as the sim predicts it
        (the profile's settings, under --set, then `extra`). A request past the profile's
        window is refused here, before either runs: tune ranked points by the streams an HTTP
        400 left, and fidelity found it only after the real run."""
        # Imported here: a command's --help must not load the engine (test_startup.py).
        from loadgen.engine.preflight import check_sim_windows
        from loadgen.engine.target import RunError
        from loadgen.scenario.plan import plan

        settings = with_sim_profile(self.sim_profile, overrides)
        real = loaded_scenario(self.scenario, (*overrides, *extra))
        predicted = loaded_scenario(self.scenario, (*settings, *extra))
        try:
            check_sim_windows(plan(predicted, run_seed=0), f"{self.sim_profile}'s sim")
        except RunError as exc:
            raise click.ClickException(str(exc)) from None
        return real, predicted


def profiled_options(profile_help: str) -> Callable[[F], F]:
    """SCENARIO and a required --sim-profile (`profile_help`: what the command does with it),
    reaching the command as `profiled: ProfiledArgs`."""
    return option_group(
        "profiled",
        ProfiledArgs,
        click.argument("scenario"),
        click.option("--sim-profile", "sim_profile", required=True,
                     type=click.Path(dir_okay=False, path_type=Path), help=profile_help),
    )  # fmt: skip


# --- Watching a run from outside (README "Watching a long run"): loadgen's own /metrics and a
# W3C traceparent header per request.
@dataclass(frozen=True, slots=True)
class WatchArgs:
    metrics_port: int | None = None
    trace_context: bool = False


WATCH_OPTIONS = option_group(
    "watch",
    WatchArgs,
    click.option(
        "--metrics-port",
        type=click.IntRange(1, 65535),
        default=None,
        metavar="N",
        help="Serve loadgen's own Prometheus /metrics (loadgen_* : streams in flight, sent, "
        "ok/failed by class, TTFT/ITL histograms per group, loop lag, dispatch lateness) on "
        "127.0.0.1:N while the command runs (wall clock).",
    ),
    click.option(
        "--trace-context",
        is_flag=True,
        help="Send a W3C traceparent header (a fresh random trace id per request) and record "
        "it per stream, so a server's traces join loadgen's records.",
    ),
)


def watch_problems(watch: WatchArgs, clock: ClockName) -> list[str]:
    """--metrics-port watches real time: the virtual clock runs faster than any scrape."""
    if watch.metrics_port is not None and clock == ClockName.VIRTUAL:
        return ["--metrics-port serves a wall-clock run (virtual time outruns any scrape): "
                "add --clock wall or drop --metrics-port"]  # fmt: skip
    if watch.trace_context and clock == ClockName.VIRTUAL:
        return ["--trace-context adds an HTTP header: the virtual clock sends none; add "
                "--clock wall or drop --trace-context"]  # fmt: skip
    return []


# --- end of the watch block


@dataclass(frozen=True, slots=True)
class RunArgs:
    """Every group a run-like command takes, as one value. `clock`: --clock (None: not given,
    run_options picks); `overrides`: --set; `sim_profile`: --sim-profile."""

    target: TargetArgs = TargetArgs()
    output: OutputArgs = OutputArgs()
    seed: SeedArgs = SeedArgs()
    facts: FactsArgs = FactsArgs()
    launch: LaunchArgs = LaunchArgs()
    telemetry: TelemetryArgs = TelemetryArgs()
    watch: WatchArgs = WatchArgs()
    overrides: tuple[str, ...] = ()
    clock: ClockName | None = None
    sim_profile: Path | None = None
    metric_percentiles: tuple[float, ...] | None = None

    def sets(self) -> tuple[str, ...]:
        """--set, with --sim-profile's settings first (with_sim_profile)."""
        return with_sim_profile(self.sim_profile, self.overrides)


def run_like(
    *, progress: bool = True, clock: bool = True, sim_profile: bool = True, watch: bool = False
) -> Callable[[F], F]:
    """The groups of a run-like command as one decorator whose values reach the command as
    `args: RunArgs`; `progress`: the live view's default (output_options); `clock` and
    `sim_profile`: whether the command offers --clock and --sim-profile; `watch`: whether it
    offers --metrics-port and --trace-context (commands whose runs go through
    engine/run.py's `watched`)."""
    groups = [TARGET_OPTIONS, TELEMETRY_OPTIONS, output_options(progress), SET_OPTION,
              METRIC_PERCENTILES_OPTION]  # fmt: skip
    groups += [CLOCK_OPTION] if clock else []
    groups += [SEED_OPTIONS, FACTS_OPTIONS, LAUNCH_OPTIONS]
    groups += [SIM_PROFILE_OPTION] if sim_profile else []
    groups += [WATCH_OPTIONS] if watch else []
    # A group not offered stays at its default, and its name free for the command's own
    # option (fidelity's required --sim-profile).
    offered = {"clock": clock, "sim_profile": sim_profile, "watch": watch}
    names = [f.name for f in dataclasses.fields(RunArgs) if offered.get(f.name, True)]

    def apply(command: F) -> F:
        return _options(*groups)(_packed(command, "args", RunArgs, names))

    return apply


def run_options(
    args: RunArgs,
    *,
    sim_clock: ClockName = ClockName.WALL,
    needs_url: bool = False,
    routed: bool = False,
    **fields: Any,
) -> RunOptions | list[str]:
    """The options of a run, or every usage mistake in them, one line each. `args.clock`
    None: wall, or `sim_clock` when the target is the built-in sim; `fields`: the
    command's own RunOptions fields (workers, slo, ...); `needs_url`: no built-in sim to
    fall back on, so a URL is required unless a server is launched; `routed`: the command
    runs through the engine's targets, so several replicas may stand behind one router."""
    from loadgen.engine.options import RunOptions

    target, telemetry = args.target, args.telemetry
    problems: list[str] = []
    try:
        server = args.launch.spec(target.model)
    except click.UsageError as exc:
        server, problems = None, [exc.message]
    base_url = target.base_url
    clock = args.clock or (ClockName.WALL if base_url or server else sim_clock)
    problems += target_problems(clock, base_url, telemetry.telemetry_url, server)
    parsed, facts_problems = _external_server(args.facts, base_url)
    problems += facts_problems
    if args.sim_profile is not None and not_builtin_sim(base_url, server):
        problems.append(
            "--sim-profile configures the built-in sim: drop --base-url / --server KIND (or "
            "compare the two with `loadgen fidelity`)"
        )
    problems += _client_problems(clock, fields.get("workers"), fields.get("ray_address"))
    problems += replica_problems(target, server, routed)
    if fields.get("until_precise") and (fields.get("workers") not in (None, 1)
                                        or fields.get("ray_address")):  # fmt: skip
        problems.append(
            "--until-precise decides when to stop from every record as it is written, in this "
            "process: drop --workers N / --ray"
        )
    problems += watch_problems(args.watch, clock)
    api_key = target.api_key
    urls: list[str] = []
    for url in target.base_urls or ([None] if needs_url and server is None else []):
        try:
            resolved, api_key = resolve_target(url, target.api_key)
        except ValueError as exc:
            problems.append(str(exc))
        else:
            urls.append(resolved)
    base_url = urls[0] if urls else None
    try:
        run_seed = resolve_run_seed(args.seed.run_seed, args.seed.replay)
    except ValueError as exc:
        problems.append(str(exc))
    if problems:
        return problems
    server_facts, server_flags = parsed
    return RunOptions(
        base_url=base_url, api_key=api_key, model=target.model, out_root=args.output.out_root,
        run_seed=run_seed.value, progress=args.output.progress, clock=clock,
        seed_source=run_seed.source, server=server, server_facts=server_facts or None,
        server_facts_sources=dict.fromkeys(server_facts, USER_SOURCE) or None,
        server_flags=server_flags, server_log=args.facts.server_log,
        telemetry_url=telemetry.telemetry_url,
        telemetry=not telemetry.no_telemetry, replica_urls=tuple(urls) if len(urls) > 1 else (),
        sim_replicas=target.sim_replicas, route=target.route_spec,
        metric_percentiles=args.metric_percentiles, metrics_port=args.watch.metrics_port,
        trace_context=args.watch.trace_context, **fields,
    )  # fmt: skip


def usable_options(args: RunArgs, **kwargs: Any) -> RunOptions:
    """run_options(args, ...), or exit 2 with every problem it found."""
    built = run_options(args, **kwargs)
    if isinstance(built, list):
        raise Problems(built)
    return built


def target_problems(
    clock: ClockName, base_url: str | None, telemetry_url: str | None, server: ServerSpec | None
) -> list[str]:
    """What a run talks to is named once: a URL, a launched server or the virtual clock."""
    problems = []
    if clock == ClockName.VIRTUAL and base_url:
        problems.append(
            "--clock virtual runs the built-in sim without HTTP; drop --base-url (or "
            "OPENAI_BASE_URL) or use --clock wall"
        )
    if clock == ClockName.VIRTUAL and telemetry_url:
        problems.append("--clock virtual runs no real GPU: drop --telemetry")
    if server is not None and base_url:
        problems.append("give --base-url or --server, not both")
    if server is not None and clock == ClockName.VIRTUAL:
        problems.append("--clock virtual runs the built-in sim's engine; drop --server")
    return problems


def not_builtin_sim(base_url: str | None, server: ServerSpec | None) -> bool:
    """The run loads another server than the built-in sim: one by URL, or one launched of
    another kind (a sim block, --sim-profile and --fault describe only the built-in sim)."""
    return bool(base_url) or (server is not None and server.kind != "sim")


def replica_problems(target: TargetArgs, server: ServerSpec | None, routed: bool) -> list[str]:
    """Several replicas: only where the engine routes (this process, or each client worker,
    a process or a Ray actor, with a router of its own), and the sim's replicas only of the
    built-in sim."""
    problems = []
    several = len(target.base_urls) > 1 or target.sim_replicas > 1
    if several and not routed:
        problems.append("several replicas are for run, soak and capacity: give one --base-url "
                        "and no --sim-replicas here")  # fmt: skip
    if target.sim_replicas > 1 and target.base_urls:
        problems.append("--sim-replicas boots the built-in sim: drop --base-url (or repeat "
                        "--base-url for your own replicas)")  # fmt: skip
    if target.sim_replicas > 1 and server is not None and server.kind != "sim":
        problems.append(f"--sim-replicas replicates the built-in sim, not {server.kind}")
    return problems


def _external_server(
    facts: FactsArgs, base_url: str | None
) -> tuple[tuple[dict[str, int], tuple[str, ...]], list[str]]:
    """--server-facts and --server-flags, parsed, and what is wrong with them."""
    try:
        parsed = parse_server_facts(facts.server_facts), parse_server_flags(facts.server_flags)
    except ValueError as exc:
        return ({}, ()), [str(exc)]
    if (parsed[0] or parsed[1] or facts.server_log) and not base_url:
        return ({}, ()), [
            "--server-facts/--server-flags/--server-log describe an external server: pass "
            "--base-url too (the built-in sim and a launched server report their own)"
        ]
    if facts.server_log is not None and not facts.server_log.is_file():
        return ({}, ()), [
            f"--server-log {facts.server_log}: no such file; give the log the server is "
            "writing now (e.g. where its stdout is redirected)"
        ]
    return (parsed[0], tuple(parsed[1])), []


def _client_problems(clock: ClockName, workers: int | None, ray_address: str | None) -> list[str]:
    """--workers and --ray: who sends, checked before any worker starts."""
    problems = []
    if clock == ClockName.VIRTUAL and workers not in (None, 1):
        problems.append("--clock virtual has no client to spread: drop --workers")
    problems += client_problems(workers, ray_address)
    if ray_address and clock == ClockName.VIRTUAL:
        problems.append("--clock virtual has no client to spread: drop --ray")
    return problems


def server_spec(
    kind: str | None,
    args: tuple[str, ...],
    model_path: Path | None,
    *,
    model: str | None = None,
    python: Path | None = None,
    bin: Path | None = None,
    boot_timeout_s: float | None = None,
) -> ServerSpec | None:
    """The server --server names. `model` (--model): the model to serve by name when no
    --model-path is given, else the name the server lists it under."""
    if kind is None:
        if args or model_path or python or bin or boot_timeout_s:
            raise click.UsageError(
                "--server-arg, --model-path, --server-python, --server-bin and --boot-timeout "
                "need --server KIND"
            )
        return None
    name = model if model_path is not None else None
    by_name = model if model_path is None else None
    from loadgen.server.spec import ServerSpec

    return ServerSpec(
        kind, tuple(args), model_path, served_name=name, model_name=by_name, python=python,
        bin=bin, boot_timeout_s=boot_timeout_s,
    )  # fmt: skip


def loaded_scenario(
    name: str, sets: Iterable[str] = (), *, allow_files_outside: bool = False
) -> Scenario:
    """load_scenario's scenario, or exit 1 with every problem it found (one line each)."""
    from loadgen.scenario.load import ScenarioError, load_scenario

    try:
        return load_scenario(name, sets, allow_files_outside=allow_files_outside)
    except ScenarioError as exc:
        raise click.ClickException(str(exc)) from None


def with_sim_profile(
    sim_profile: Path | None,
    overrides: tuple[str, ...],
) -> tuple[str, ...]:
    """`overrides` with the profile's settings put first: --set sim.profile=FILE and one --set
    per fact, so the user's own --set, applied after them, still wins."""
    if sim_profile is None:
        return overrides
    path = sim_profile.resolve()
    try:
        profile = load_profile_file(path)
    except ProfileFileError as exc:
        raise click.ClickException(str(exc)) from None
    sets = [f"sim.profile={json.dumps(str(path))}"]
    sets += [f"sim.{name}={json.dumps(value)}" for name, value in profile.facts.items()]
    return (*sets, *overrides)


def with_load_sweep(loaded: Scenario, load: LoadSweepArgs) -> Scenario:
    """The scenario with one arm per `--concurrency` or `--rate` value (itself without them),
    each rate's open loop capped at `--max-concurrency`."""
    concurrency, rate, requests = load.concurrency, load.rate, load.requests
    max_concurrency = load.max_concurrency
    if concurrency is not None and rate is not None:
        raise click.UsageError("give --concurrency or --rate, not both")
    if concurrency is not None and max_concurrency is not None:
        raise click.UsageError(
            "--max-concurrency caps a rate; --concurrency is already a closed loop's seats"
        )
    if concurrency is None and rate is None:
        if requests is not None:
            raise click.UsageError("--requests sizes the arms of --concurrency or --rate")
        return loaded if max_concurrency is None else with_seat_cap(loaded, max_concurrency)
    over, text = ("concurrency", concurrency) if concurrency is not None else ("rate", rate)
    assert text is not None
    try:
        values = parse_load_values(text, over)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    axis = LoadAxis(over, requests=requests, cap=max_concurrency)
    problem = load_problem(loaded, axis)
    if problem:
        raise click.ClickException(problem)
    sweep = load_sweep(loaded, axis, values)
    problems = size_problems([arm.scenario for arm in sweep.arms])
    if problems:
        raise click.ClickException(f"{loaded.source or loaded.name}: {problems[0]}")
    return dataclasses.replace(loaded, sweep=sweep)


def with_seat_cap(loaded: Scenario, cap: int) -> Scenario:
    """The scenario's poisson or gamma arrival with at most `cap` streams in flight."""
    a = loaded.arrival
    if not isinstance(a, Poisson | Gamma):
        raise click.UsageError(
            f"--max-concurrency caps a poisson or gamma arrival, and {loaded.name}'s is "
            f"{a.kind} (give --rate R, or a closed arrival's concurrency)"
        )
    return dataclasses.replace(loaded, arrival=dataclasses.replace(a, concurrency=cap))


def workers_value(value: str) -> int | None:
    """`--workers`: a count of at least 1, or None for `auto`."""
    if value == "auto":
        return None
    if not value.isdigit() or int(value) < 1:
        raise click.BadParameter(f"{value!r}: give a whole number of at least 1, or auto")
    return int(value)


def api_option(default: str | None, help: str | None = None) -> Callable[[F], F]:
    """`--api`, one of the scenario's API kinds; `default` None: the scenario's own."""
    return click.option("--api", type=click.Choice(API_KINDS), default=default, help=help)


# Who sends, beside --workers (run: N|auto; request: N): the same Ray path for both.
RAY_OPTION = click.option(
    "--ray",
    "ray_address",
    metavar="ADDRESS",
    help="Send the streams from --workers Ray actors spread over the cluster at ADDRESS (auto, "
    "HOST:PORT, ray://HOST:PORT, or local); needs pip install 'loadgen[ray]'.",
)


def slo_option(purpose: str, *, required: bool = False) -> Any:
    """`--slo` in the one grammar every command takes (analysis/slo.py), units in its help."""
    # No default=None: click 8.5 counts a stated None as given, and a required --slo left
    # out reached parse_slo as None (a traceback from capacity and tune).
    return click.option("--slo", required=required,
                        metavar="ttft_p90=S,tpot_p90=MS,e2e_p99=S",
                        help=f"{purpose}: {SLO_HELP}.")  # fmt: skip


def parsed_slo(text: str, attain: float = DEFAULT_ATTAIN) -> tuple[SloItem, ...]:
    """--slo's items; a usage error in one line (the grammar and units) otherwise."""
    try:
        return parse_slo(text, attain)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def with_slo(opts: RunOptions, items: tuple[SloItem, ...]) -> RunOptions:
    """`opts` with --slo's items as each metric's limit and share of streams (no items: None,
    the scenario's own slo stands)."""
    return dataclasses.replace(
        opts,
        slo={i.key: i.limit for i in items} or None,
        slo_shares={i.key: i.share for i in items} or None,
    )


def _precise_targets(
    _ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]
) -> tuple[PrecisionTarget, ...]:
    targets = []
    for text in values:
        try:
            targets.append(parse_precise(text))
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
    if len({t.name for t in targets}) < len(targets):
        raise click.BadParameter("a target is given twice (expected each metric_pNN once)")
    return tuple(targets)


def until_precise_option(purpose: str) -> Any:
    """`--until-precise` in the one grammar every command takes (analysis/precision.py)."""
    return click.option("--until-precise", "until_precise", multiple=True,
                        metavar="METRIC_pNN=MARGIN", callback=_precise_targets,
                        help=purpose)  # fmt: skip


UNTIL_PRECISE_OPTION = until_precise_option(f"Stop sending once precise: {PRECISE_HELP}.")
# A soak keeps sending for its duration: precision closes its windows instead.
SOAK_PRECISE_OPTION = until_precise_option(
    "Close each soak window once precise: metric_pNN=margin (e.g. ttft_p90=5%): a window ends "
    "as soon as the 95% order-statistic confidence interval of that percentile of the "
    "measured ok streams it holds is within the margin (relative) of it, and the next begins "
    "at once; a window is at most --window long (thirds: a third of --duration), and the last "
    "is cut by the soak's end; repeat the option for several."
)
