"""The options the run-like commands share (run, soak, capacity, calibrate, fidelity,
probe-cache) and their resolution into what a run talks to: a URL, a launched server or the
virtual clock. A usage mistake is caught here, before anything is loaded or sent."""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from loadgen.analysis.slo import DEFAULT_ATTAIN, SLO_HELP, SloItem, parse_slo
from loadgen.client.endpoint import resolve_target
from loadgen.engine.backends import CLOCKS
from loadgen.scenario.limits import size_problems
from loadgen.scenario.load_axis import LoadAxis, load_problem, load_sweep, parse_load_values
from loadgen.scenario.model import Scenario
from loadgen.server.spec import SERVER_KINDS, ServerSpec
from loadgen.server.user_facts import parse_server_facts, parse_server_flags
from loadgen.sim.profile_file import ProfileFileError, load_profile_file

F = TypeVar("F", bound=Callable[..., Any])


def _options(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    """Several click options as one decorator, applied in the order written."""

    def apply(f: F) -> F:
        for decorator in reversed(decorators):
            f = decorator(f)
        return f

    return apply


# The target of a run: a URL (or the built-in sim), its key, the model and GPU telemetry.
TARGET_OPTIONS = _options(
    click.option(
        "--base-url",
        envvar="OPENAI_BASE_URL",
        default=None,
        help="Server to load (default: boot the built-in sim). Env: OPENAI_BASE_URL.",
    ),
    click.option("--api-key", envvar="OPENAI_API_KEY", default=None, help="Env: OPENAI_API_KEY."),
    click.option("--model", default=None, help="Model name (default: the server's first)."),
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
# Requests per load value, for a load sweep's arms and a capacity search's probes alike.
REQUESTS_OPTION = click.option(
    "--requests",
    type=click.IntRange(min=1),
    default=None,
    help="Requests per load value (default: the arrival's count, else at least 32, 4 per "
    "seat or 10 s of arrivals).",
)
CLOCK_OPTION = click.option(
    "--clock",
    type=click.Choice(list(CLOCKS)),
    default="wall",
    show_default=True,
    help="virtual: the built-in sim's engine on a discrete-event clock, no HTTP (exact, "
    "repeatable, faster than real time); wall: real time over HTTP.",
)
# A load sweep from the command line, as `vllm bench serve` users run one: one arm per value on
# one server boot (scenario/load_axis.py says what each value sets).
LOAD_SWEEP_OPTIONS = _options(
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
# What a server loadgen did not launch cannot report of itself.
EXTERNAL_SERVER_OPTIONS = _options(
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
)
OUTPUT_OPTIONS = _options(
    click.option(
        "--out",
        "out_root",
        type=click.Path(path_type=Path),
        default=Path("runs"),
        show_default=True,
        help="Folder that receives the run directory.",
    ),
    click.option(
        "--set",
        "overrides",
        multiple=True,
        metavar="KEY=VALUE",
        help="Override a scenario field, e.g. --set groups.minnows.count=7.",
    ),
)


@dataclass(frozen=True, slots=True)
class LaunchArgs:
    """What the launch options said, before --model is known."""

    kind: str | None
    args: tuple[str, ...]
    model_path: Path | None
    python: Path | None
    bin: Path | None
    boot_timeout_s: float | None

    def spec(self, model: str | None) -> ServerSpec | None:
        """The server to launch (None: none asked for); see server_spec."""
        return server_spec(self.kind, self.args, self.model_path, model=model,
                           python=self.python, bin=self.bin,
                           boot_timeout_s=self.boot_timeout_s)  # fmt: skip


def server_options(command: Any) -> Any:
    """--server, --server-arg, --model-path, --server-python, --server-bin, --boot-timeout,
    handed to the command as one `launch: LaunchArgs`: every command that launches a server."""

    @functools.wraps(command)
    def packed(
        *args: Any,
        server_kind: str | None,
        server_args: tuple[str, ...],
        model_path: Path | None,
        server_python: Path | None,
        server_bin: Path | None,
        boot_timeout_s: float | None,
        **kwargs: Any,
    ) -> Any:
        launch = LaunchArgs(server_kind, tuple(server_args), model_path, server_python,
                            server_bin, boot_timeout_s)  # fmt: skip
        return command(*args, launch=launch, **kwargs)

    f = click.option(
        "--boot-timeout",
        "boot_timeout_s",
        type=click.FloatRange(min=1),
        default=None,
        help="Seconds a launched server may take to serve (default per kind and build: vLLM "
        "CPU 240, GPU 900; SGLang 900; llama.cpp 60).",
    )(packed)
    f = click.option(
        "--server-bin",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="The server's executable (vllm, sglang, llama-server) to launch.",
    )(f)
    f = click.option(
        "--server-python",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="The Python that has vLLM or SGLang installed (default: `vllm`/`sglang` on "
        "PATH, then this environment).",
    )(f)
    f = click.option(
        "--model-path",
        type=click.Path(path_type=Path),
        default=None,
        help="Model the launched server serves (or --model NAME: one in the server's cache).",
    )(f)
    f = click.option(
        "--server-arg",
        "server_args",
        multiple=True,
        metavar="ARG",
        help="A flag for the launched server, repeatable: --server-arg=--max-num-seqs=4.",
    )(f)
    return click.option(
        "--server",
        "server_kind",
        type=click.Choice(SERVER_KINDS),
        default=None,
        help="Launch this server on a free loopback port (per boot in a sweep).",
    )(f)


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
    return ServerSpec(
        kind, tuple(args), model_path, served_name=name, model_name=by_name, python=python,
        bin=bin, boot_timeout_s=boot_timeout_s,
    )  # fmt: skip


def external_server(
    server_facts: tuple[str, ...], server_flags: tuple[str, ...], base_url: str | None
) -> tuple[dict[str, int], list[str]]:
    """--server-facts and --server-flags, parsed; a usage error without --base-url."""
    try:
        facts, flags = parse_server_facts(server_facts), parse_server_flags(server_flags)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if (facts or flags) and not base_url:
        raise click.UsageError(
            "--server-facts/--server-flags describe an external server: pass --base-url too"
            " (the built-in sim reports its own)"
        )
    return facts, flags


def with_sim_profile(
    sim_profile: Path | None,
    overrides: tuple[str, ...],
    base_url: str | None,
    server: ServerSpec | None,
) -> tuple[str, ...]:
    """`overrides` with the profile's settings put first: --set sim.profile=FILE and one --set
    per fact, so the user's own --set, applied after them, still wins."""
    if sim_profile is None:
        return overrides
    if base_url or (server is not None and server.kind != "sim"):
        raise click.UsageError(
            "--sim-profile configures the built-in sim: drop --base-url / --server KIND (or "
            "compare the two with `loadgen fidelity`)"
        )
    path = sim_profile.resolve()
    try:
        profile = load_profile_file(path)
    except ProfileFileError as exc:
        raise click.ClickException(str(exc)) from None
    sets = [f"sim.profile={json.dumps(str(path))}"]
    sets += [f"sim.{name}={json.dumps(value)}" for name, value in profile.facts.items()]
    return (*sets, *overrides)


def slo_option(purpose: str, *, required: bool = False) -> Any:
    """`--slo` in the one grammar every command takes (analysis/slo.py), units in its help."""
    return click.option("--slo", required=required, default=None,
                        metavar="ttft_p90=S,tpot_p90=MS,e2e_p99=S",
                        help=f"{purpose}: {SLO_HELP}.")  # fmt: skip


def parsed_slo(text: str, attain: float = DEFAULT_ATTAIN) -> tuple[SloItem, ...]:
    """--slo's items; a usage error in one line (the grammar and units) otherwise."""
    try:
        return parse_slo(text, attain)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def check_target(
    clock: str, base_url: str | None, telemetry_url: str | None, server: ServerSpec | None
) -> None:
    """What a run talks to is named once: a URL, a launched server or the virtual clock."""
    if clock == "virtual" and base_url:
        raise click.UsageError(
            "--clock virtual runs the built-in sim without HTTP; drop --base-url (or "
            "OPENAI_BASE_URL) or use --clock wall"
        )
    if clock == "virtual" and telemetry_url:
        raise click.UsageError("--clock virtual runs no real GPU: drop --telemetry")
    if server is not None and base_url:
        raise click.UsageError("give --base-url or --server, not both")
    if server is not None and clock == "virtual":
        raise click.UsageError("--clock virtual runs the built-in sim's engine; drop --server")


def resolved_target(base_url: str | None, api_key: str | None) -> tuple[str | None, str | None]:
    """The URL and key a run uses (client/endpoint.py); a bad URL is a usage error."""
    if base_url is None:
        return None, api_key
    try:
        return resolve_target(base_url, api_key)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def with_load_sweep(
    loaded: Scenario, concurrency: str | None, rate: str | None, requests: int | None
) -> Scenario:
    """The scenario with one arm per `--concurrency` or `--rate` value (itself without them)."""
    if concurrency is not None and rate is not None:
        raise click.UsageError("give --concurrency or --rate, not both")
    if concurrency is None and rate is None:
        if requests is not None:
            raise click.UsageError("--requests sizes the arms of --concurrency or --rate")
        return loaded
    over, text = ("concurrency", concurrency) if concurrency is not None else ("rate", rate)
    assert text is not None
    try:
        values = parse_load_values(text, over)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    axis = LoadAxis(over, requests=requests)
    problem = load_problem(loaded, axis)
    if problem:
        raise click.ClickException(problem)
    sweep = load_sweep(loaded, axis, values)
    problems = size_problems([arm.scenario for arm in sweep.arms])
    if problems:
        raise click.ClickException(f"{loaded.source or loaded.name}: {problems[0]}")
    return dataclasses.replace(loaded, sweep=sweep)


def workers_value(value: str) -> int | None:
    """`--workers`: a count of at least 1, or None for `auto`."""
    if value == "auto":
        return None
    if not value.isdigit() or int(value) < 1:
        raise click.BadParameter(f"{value!r}: give a whole number of at least 1, or auto")
    return int(value)
