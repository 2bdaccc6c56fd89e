"""What a run talks to is checked once (engine/cli_options.check_target), for `run` and `soak`
alike: a URL, a launched server or the virtual clock, never two of them."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from loadgen.cli import main
from loadgen.engine.cli_options import check_target
from loadgen.server.spec import ServerSpec

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
    with pytest.raises(click.UsageError, match=message):
        check_target(clock, base_url, telemetry, server)


def test_one_target_passes() -> None:
    for clock, base_url, telemetry, server in (
        ("virtual", None, None, None),
        ("wall", URL, URL, None),
        ("wall", None, None, VLLM),
    ):
        assert check_target(clock, base_url, telemetry, server) is None


@pytest.mark.parametrize("command", ["run", "soak"])
def test_run_and_soak_refuse_a_url_on_the_virtual_clock(command: str, tmp_path: Path) -> None:
    args = [command, "smoke", "--clock", "virtual", "--base-url", URL, "--out", str(tmp_path)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert "--clock virtual runs the built-in sim without HTTP; drop --base-url" in result.output
    assert not any(tmp_path.iterdir())  # refused before a run directory was made
