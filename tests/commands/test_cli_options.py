"""What a run talks to is checked once (commands/options.target_problems), for `run` and `soak`
alike: a URL, a launched server or the virtual clock, never two of them."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from loadgen.analysis.slo import parse_slo
from loadgen.cli import main
from loadgen.client.routing import RoutePolicy, RouteSpec
from loadgen.clock import ClockName
from loadgen.commands.options import (
    LAUNCH_OPTIONS,
    FactsArgs,
    LaunchArgs,
    OutputArgs,
    RunArgs,
    SeedArgs,
    TargetArgs,
    not_builtin_sim,
    replica_problems,
    run_options,
    target_problems,
    with_slo,
)
from loadgen.scenario.model import API_KINDS
from loadgen.server.spec import ServerSpec
from loadgen.sim.profile_file import FittedProfile, write_profile_file
from loadgen.sim.profiles import sim_profile

from support.paths import REPO

URL = "http://127.0.0.1:1"
VLLM = ServerSpec("vllm")


@pytest.mark.parametrize(
    ("clock", "base_url", "telemetry", "server", "message"),
    [
        ("virtual", URL, None, None, "--clock virtual runs the built-in sim without HTTP"),
        ("virtual", None, URL, None, "--clock virtual runs no real GPU: drop --telemetry"),
        ("wall", URL, None, VLLM, "give --base-url or --server, not both"),
        ("virtual", None, None, VLLM, "--clock virtual runs the built-in sim's engine"),
    ],
)
def test_two_targets_at_once_are_a_usage_error(
    clock: str, base_url: str | None, telemetry: str | None, server: ServerSpec | None,
    message: str,
) -> None:  # fmt: skip
    assert [p for p in target_problems(clock, base_url, telemetry, server) if message in p]


def test_one_target_passes() -> None:
    for clock, base_url, telemetry, server in (
        ("virtual", None, None, None),
        ("wall", URL, URL, None),
        ("wall", None, None, VLLM),
    ):
        assert target_problems(clock, base_url, telemetry, server) == []


@pytest.mark.parametrize("command", ["run", "soak"])
def test_run_and_soak_refuse_a_url_on_the_virtual_clock(command: str, tmp_path: Path) -> None:
    args = [command, "smoke", "--clock", "virtual", "--base-url", URL, "--out", str(tmp_path)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert "--clock virtual runs the built-in sim without HTTP; drop --base-url" in result.output
    assert not any(tmp_path.iterdir())  # refused before a run directory was made


def test_every_usage_mistake_is_said_at_once_one_line_each(tmp_path: Path) -> None:
    args = ["run", "smoke", "--clock", "virtual", "--base-url", URL, "--server-facts", "x=1"]
    args += ["--seed", "1", "--replay", str(tmp_path), "--out", str(tmp_path)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 3, result.output
    assert "--clock virtual runs the built-in sim without HTTP" in errors[0]
    assert "x" in errors[1]  # the unknown fact, named
    assert "--seed and --replay both name a seed" in errors[2]
    assert not any(tmp_path.iterdir())


def test_run_options_builds_the_options_when_nothing_is_wrong(tmp_path: Path) -> None:
    built = run_options(RunArgs(
        TargetArgs(base_urls=("127.0.0.1:8000/v1",), model="m"),
        OutputArgs(tmp_path, progress=False),
        SeedArgs(run_seed=7),
        facts=FactsArgs(("max_num_seqs=4",), ("--max-num-seqs=4",)),
    ))  # fmt: skip
    assert not isinstance(built, list), built
    assert (built.base_url, built.model, built.run_seed, built.seed_source) == (
        "http://127.0.0.1:8000", "m", 7, "user"
    )  # fmt: skip
    assert built.clock == ClockName.WALL and built.server_facts == {"max_num_seqs": 4}
    assert built.server_flags == ("--max-num-seqs=4",)
    assert built.replica_urls == () and built.replicas == 1


def test_several_base_urls_are_replicas_behind_the_route(tmp_path: Path) -> None:
    built = run_options(RunArgs(
        TargetArgs(base_urls=("127.0.0.1:8000", "http://127.0.0.1:8001/v1"),
                   route="prefix-hash", route_prefix_blocks=3, route_block_chars=64),
        OutputArgs(tmp_path, progress=False),
    ), routed=True)  # fmt: skip
    assert not isinstance(built, list), built
    assert built.base_url == "http://127.0.0.1:8000" and built.replicas == 2
    assert built.replica_urls == ("http://127.0.0.1:8000", "http://127.0.0.1:8001")
    assert built.route == RouteSpec(RoutePolicy.PREFIX_HASH, 3, 64)


@pytest.mark.parametrize(
    ("command", "flags", "said"),
    [
        ("run", ["--sim-replicas", "2", "--base-url", URL], "--sim-replicas boots the built-in"),
        ("run", ["--sim-replicas", "2", "--server", "vllm"], "replicates the built-in sim, not"),
    ],
)
def test_replicas_are_refused_where_nothing_routes_them(
    tmp_path: Path, command: str, flags: list[str], said: str
) -> None:
    args = [command, *(["smoke"] if command == "run" else []), *flags, "--out", str(tmp_path)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert said in result.output
    assert not any(tmp_path.iterdir())


def test_client_workers_route_replicas_processes_and_ray_actors_alike() -> None:
    """Each client worker routes its own share (client/pool.py), a process or a Ray actor, so
    --workers or --ray with several replicas stands."""
    several = TargetArgs(base_urls=(URL, URL))
    assert replica_problems(several, None, True) == []
    assert replica_problems(TargetArgs(sim_replicas=3), None, True) == []
    assert replica_problems(several, None, False) != []  # where nothing routes them


def test_one_base_url_and_one_sim_are_no_replicas(tmp_path: Path) -> None:
    for target in (TargetArgs(base_urls=(URL,)), TargetArgs(sim_replicas=1)):
        built = run_options(RunArgs(target, OutputArgs(tmp_path, progress=False)))
        assert not isinstance(built, list), built
        assert built.replicas == 1


@pytest.mark.parametrize(
    ("command", "flags"),
    [
        ("soak", ["--server", "vllm", "--base-url", URL]),
        (
            "capacity",
            ["--over", "concurrency", "--slo", "ttft_p90=1", "--server-facts", "max_num_seqs=4"],
        ),
        ("calibrate", ["--server-facts", "max_num_seqs=4", "--clock", "virtual"]),
        ("fidelity", ["--sim-profile", "p.yaml", "--server-arg", "x"]),
    ],
)
def test_every_run_like_command_offers_the_same_groups(command: str, flags: list[str]) -> None:
    args = [command] + ([] if command == "calibrate" else ["smoke"]) + flags
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert "no such option" not in result.output
    assert any(
        w in result.output
        for w in ("not both", "external server", "need --server KIND", "pass --base-url too")
    ), result.output


@pytest.mark.parametrize("command", ["capacity", "tune"])
@pytest.mark.parametrize(
    ("load", "said"),
    [
        (["--min", "1.5"], "--min 1.5: expected a whole number >= 1"),
        (["--min", "8", "--max", "4"], "--min 8 is above --max 4"),
    ],
)
def test_capacity_and_tune_check_a_load_range_alike(
    command: str, load: list[str], said: str, tmp_path: Path
) -> None:
    profile = tmp_path / "fit.yaml"
    # Fitted on the sim: it predicts every flag, so tune gets as far as the load range.
    fitted = FittedProfile("tiny-fit", sim_profile("tiny"), 0.001, {}, fitted_on={"server": "sim"})
    write_profile_file(profile, fitted)
    tune = ["--sim-profile", str(profile), "--search", "max_num_seqs=2", "--objective", "capacity"]
    args = [command, "smoke", *(tune if command == "tune" else []), "--slo", "ttft_p90=1"]
    result = CliRunner().invoke(main, [*args, "--over", "concurrency", *load])
    assert result.exit_code == 2, result.output
    assert said in result.output


@pytest.mark.parametrize("command", ["capacity", "tune"])
def test_a_required_slo_left_out_is_a_usage_error_in_one_line(command: str, tmp_path: Path) -> None:
    # Stated as default=None, click 8.5 took the option as given: capacity and tune reached
    # parse_slo with None and died in a traceback.
    profile = tmp_path / "fit.yaml"
    fitted = FittedProfile("tiny-fit", sim_profile("tiny"), 0.001, {}, fitted_on={"server": "sim"})
    write_profile_file(profile, fitted)
    tune = ["--sim-profile", str(profile), "--search", "max_num_seqs=2"]
    args = [command, "smoke", *(tune if command == "tune" else ["--over", "concurrency"])]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert "Error: Missing option '--slo'." in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_slo_items_set_each_limit_and_share_and_none_leave_the_scenarios(tmp_path: Path) -> None:
    built = run_options(RunArgs(output=OutputArgs(tmp_path, progress=False)))
    assert not isinstance(built, list), built
    judged = with_slo(built, parse_slo("ttft_p90=2,tpot_p99=50"))
    assert judged.slo == {"ttft_s": 2.0, "tpot_ms": 50.0}
    assert judged.slo_shares == {"ttft_s": 0.9, "tpot_ms": 0.99}
    unjudged = with_slo(built, ())
    assert unjudged.slo is None and unjudged.slo_shares is None


@pytest.mark.parametrize("command", ["run", "request", "probe-cache"])
def test_every_api_option_offers_the_scenarios_api_kinds(command: str) -> None:
    cmd = main.get_command(click.Context(main), command)
    assert cmd is not None
    [api] = [p for p in cmd.params if p.name == "api"]
    assert isinstance(api.type, click.Choice)
    assert tuple(api.type.choices) == API_KINDS
    refused = CliRunner().invoke(main, [command, "smoke", "--api", "responses"])
    assert refused.exit_code == 2 and "'responses' is not one of 'completions', 'chat'" in (
        refused.output
    )


def test_each_launch_option_reaches_the_server_spec(tmp_path: Path) -> None:
    seen: list[LaunchArgs] = []

    @click.command()
    @LAUNCH_OPTIONS
    def launch_only(launch: LaunchArgs) -> None:
        seen.append(launch)

    given = ["--server", "vllm", "--server-arg=--max-num-seqs=4", "--model-path", "m",
             "--server-python", "/py", "--server-bin", "/vllm", "--boot-timeout", "9"]  # fmt: skip
    result = CliRunner().invoke(launch_only, given)
    assert result.exit_code == 0, result.output
    [launch] = seen
    assert launch.spec("served") == ServerSpec(
        "vllm", ("--max-num-seqs=4",), Path("m"), served_name="served", python=Path("/py"),
        bin=Path("/vllm"), boot_timeout_s=9.0,
    )  # fmt: skip
    assert LaunchArgs().spec("served") is None


PROFILE = str(REPO / "profiles" / "vllm-cpu-tiny.yaml")


@pytest.mark.parametrize(
    "command",
    [
        ["run", "{s}", "--clock", "virtual"],
        ["soak", "{s}", "--clock", "virtual"],
        ["capacity", "{s}", "--clock", "virtual", "--over", "rate", "--slo", "ttft=1"],
        ["calibrate", "--scenario", "{s}", "--clock", "virtual"],
        ["tune", "{s}", "--sim-profile", PROFILE, "--search", "max_num_seqs=2", "--slo", "ttft=1"],
        ["fidelity", "{s}", "--sim-profile", PROFILE, "--server", "sim"],
    ],
)
def test_every_command_says_a_bad_scenarios_problems_and_sends_nothing(
    command: list[str], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nseed: 1\ngroups: []\n", encoding="utf-8")
    args = [a.format(s=bad) for a in command] + ["--out", str(tmp_path / "runs")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    assert (
        result.output
        == f"Error: {bad}:3: groups: got an empty list (expected at least one group)\n"
    )
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("base_url", "server", "other"),
    [(URL, None, True), (None, VLLM, True), (None, ServerSpec("sim"), False), (None, None, False)],
)
def test_only_a_url_or_another_kind_launched_is_not_the_builtin_sim(
    base_url: str | None, server: ServerSpec | None, other: bool
) -> None:
    assert not_builtin_sim(base_url, server) is other


@pytest.mark.parametrize("command", [["run", "smoke"], ["request", "--base-url", URL]])
def test_run_and_request_take_one_ray_option(command: list[str]) -> None:
    cmd = main.get_command(click.Context(main), command[0])
    assert cmd is not None
    [ray] = [p for p in cmd.params if p.name == "ray_address"]
    assert isinstance(ray, click.Option) and "ray://HOST:PORT" in (ray.help or "")
    refused = CliRunner().invoke(main, [*command, "--ray", " "])
    assert refused.exit_code == 2 and "--ray '': no address" in refused.output
