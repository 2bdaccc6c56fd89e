"""The clock is chosen once (engine/backends.py): `--clock` parses into a ClockName, each
ClockKind says what its backend needs, and nothing past the options asks for the clock by name."""

from __future__ import annotations

import re

import click
import pytest
from click.testing import CliRunner

from loadgen.clock import ClockName
from loadgen.commands.options import CLOCK_OPTION
from loadgen.engine.backends import CLOCKS, clock_of, shared_target
from loadgen.engine.run import RunOptions
from loadgen.scenario.load import load_scenario

from support.paths import REPO

PACKAGE = REPO / "loadgen"
ENGINE = PACKAGE / "engine"
# Where options are resolved: the commands (loadgen/commands/, outside engine) check a clock's
# name against the other options they got; backends.py keys the kinds by it.
RESOLVERS = ("backends.py",)


def test_each_clock_says_what_its_backend_needs():
    wall = clock_of(RunOptions(clock=ClockName.WALL))
    virtual = clock_of(RunOptions(clock=ClockName.VIRTUAL))
    assert (wall.opens_sockets, wall.engine_per_arm, wall.unbooted[0]) == (True, False, 0)
    assert (virtual.opens_sockets, virtual.engine_per_arm, virtual.unbooted[0]) == (False, True, 1)


def test_the_clock_option_offers_exactly_the_registered_clocks():
    @CLOCK_OPTION
    def cmd(clock: str) -> None: ...

    choice = cmd.__click_params__[0].type  # type: ignore[attr-defined]
    assert list(choice.choices) == list(CLOCKS) == list(ClockName) == ["wall", "virtual"]


def test_the_clock_option_hands_the_command_the_type_not_the_word():
    seen = []

    @click.command()
    @CLOCK_OPTION
    def cmd(clock: ClockName) -> None:
        seen.append(clock)

    for args in (["--clock", "wall"], ["--clock", "virtual"], []):
        assert CliRunner().invoke(cmd, args).exit_code == 0
    # Not given: None, and run_options picks (wall, or virtual for a soak of the sim).
    assert seen == [ClockName.WALL, ClockName.VIRTUAL, None]
    assert all(type(c) is ClockName for c in seen[:2])
    refused = CliRunner().invoke(cmd, ["--clock", "sundial"])
    assert refused.exit_code == 2 and "'sundial' is not one of 'wall', 'virtual'" in refused.output


def test_no_stage_past_the_options_tests_the_clock_by_name():
    asked = re.compile(r"clock\s*[!=]=\s*ClockName\.")
    found = [
        f"{p.name}:{n}"
        for p in sorted(ENGINE.glob("*.py"))
        if p.name not in RESOLVERS
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if asked.search(line)
    ]
    assert found == []


def test_no_module_compares_the_clock_as_a_string():
    word = re.compile(r"""clock\s*[!=]=\s*["'](wall|virtual)["']|clock", ["'](wall|virtual)""")
    found = [
        f"{p.relative_to(PACKAGE)}:{n}"
        for p in sorted(PACKAGE.rglob("*.py"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if word.search(line)
    ]
    assert found == []


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "opts",
    [RunOptions(clock=ClockName.VIRTUAL), RunOptions(base_url="http://127.0.0.1:9/v1")],
    ids=["virtual", "url"],
)
async def test_a_series_of_runs_shares_no_server_where_each_reaches_its_own(opts, tmp_path):
    scenario = load_scenario("whale_c4", [])
    async with shared_target(scenario, opts, tmp_path, print) as target:
        assert target is None
    assert not (tmp_path / "boot").exists()
