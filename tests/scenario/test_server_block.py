"""The scenario's `server:` block, and a command template launched per boot of a sweep."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
import pytest

from loadgen.engine.run import RunOptions, run_plan
from loadgen.scenario.load import load_scenario
from loadgen.scenario.marked_yaml import ScenarioError
from loadgen.scenario.model import ServerConfig
from loadgen.scenario.plan import plan
from loadgen.server.spec import CommandProfile, ServerSpec, flag_args, profile_for

from support.cli import assert_one_line_error, loadgen
from support.paths import REPO

BASE = """\
name: block
seed: 1
groups:
  - name: g
    count: 2
    prompt: {tokens: 64, shape: prose, cache: salted}
    max_tokens: 8
metrics: {poll_interval_s: 0.05}
"""


def load(tmp_path: Path, extra: str):
    path = tmp_path / "s.yaml"
    path.write_text(BASE + extra)
    return load_scenario(path)


def test_the_block_is_read_with_paths_relative_to_the_file(tmp_path: Path) -> None:
    s = load(tmp_path, "server:\n  kind: vllm\n  model_path: m\n  args: [--max-model-len, 8192]\n"
                       "  env: {VLLM_CPU_KVCACHE_SPACE: 2}\n")  # fmt: skip
    assert s.server == ServerConfig(
        "vllm", tmp_path / "m", ("--max-model-len", "8192"), (("VLLM_CPU_KVCACHE_SPACE", "2"),)
    )


def test_command_kind_needs_a_template_and_other_kinds_refuse_one(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match=r"server.command: missing \(kind: command needs"):
        load(tmp_path, "server: {kind: command}\n")
    with pytest.raises(ScenarioError, match=r"server.command: only applies to kind: command"):
        load(tmp_path, "server: {kind: vllm, command: [x]}\n")
    with pytest.raises(ScenarioError, match=r"server.kind: got 'vlm'.*did you mean 'vllm'"):
        load(tmp_path, "server: {kind: vlm}\n")


def test_a_template_substitutes_port_and_swept_flags_and_appends_the_rest() -> None:
    spec = ServerSpec("command", command=("srv", "--port={port}", "--budget", "{budget}"))
    profile = profile_for(spec, {"budget": 512, "max_num_seqs": 2})
    assert isinstance(profile, CommandProfile)
    flags = flag_args(profile, {"budget": 512, "max_num_seqs": 2})
    assert flags == ["--max-num-seqs", "2"]
    argv = profile.argv(port=9, model=Path("m"), served_name="x", flags=flags)
    assert argv == ["srv", "--port=9", "--budget", "512", "--max-num-seqs", "2"]


async def test_a_command_template_sweep_boots_the_templated_server(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "loadgen", "sim", "--port", "{port}", "--model",
               "{served_name}", "--max-num-batched-tokens", "{max_num_batched_tokens}"]  # fmt: skip
    scenario = load(
        tmp_path,
        "server:\n  kind: command\n  served_name: templated\n"
        f"  command: {orjson.dumps(command).decode()}\n"
        "sweep:\n  max_num_batched_tokens: [128, 2048]\n  boots_per_arm: 1\n",
    )
    opts = RunOptions(out_root=tmp_path / "runs", progress=False)
    root = await run_plan(plan(scenario), opts, warn=lambda m: None)
    boots = orjson.loads((root / "run.json").read_bytes())["boots"]
    for b, budget in zip(boots, (128, 2048), strict=True):
        (attempt,) = b["attempts"]
        assert attempt["kind"] == "command"
        argv = attempt["argv"]
        assert argv[argv.index("--max-num-batched-tokens") + 1] == str(budget)
        assert argv[argv.index("--model") + 1] == "templated"
        assert attempt["facts"]["max_num_batched_tokens"] == budget
        assert attempt["facts"]["sources"]["max_num_batched_tokens"] == "boot_log"
        assert b["status"] == "measured"


def test_the_block_names_the_install_and_the_boot_timeout(tmp_path: Path) -> None:
    s = load(tmp_path, "server:\n  kind: sglang\n  model_path: m\n  python: venv/bin/python\n"
                       "  bin: /usr/bin/sglang\n  boot_timeout_s: 1200\n")  # fmt: skip
    assert s.server == ServerConfig(
        "sglang", tmp_path / "m", python=tmp_path / "venv/bin/python",
        bin=Path("/usr/bin/sglang"), boot_timeout_s=1200.0,
    )  # fmt: skip
    with pytest.raises(
        ScenarioError, match=r"server.boot_timeout_s: got 0 \(expected a number > 0"
    ):
        load(tmp_path, "server: {kind: vllm, boot_timeout_s: 0}\n")


def test_a_missing_command_executable_is_named_in_one_line(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        (REPO / "scenarios" / "smoke.yaml").read_text()
        + "server:\n  kind: command\n  command: [no-such-server-xyz, --port, '{port}']\n"
    )
    proc = loadgen("run", scenario, "--out", tmp_path / "runs", "--no-progress")
    line = assert_one_line_error(proc)
    assert line == (
        "Error: server command: executable 'no-such-server-xyz' not found (not a file, nor on "
        "PATH); fix server.command[0] in the scenario"
    )
    assert "make setup-real" not in proc.stderr


def test_a_found_command_executable_is_its_path() -> None:
    profile = CommandProfile([sys.executable, "-m", "loadgen", "sim"], {})
    assert profile.default_model() == Path(sys.executable)


def test_the_blocks_env_reaches_the_server_and_keeps_the_kinds_traits(tmp_path: Path) -> None:
    from loadgen.server.launcher import launch_sync
    from loadgen.server.spec import profile_for

    prof = profile_for(ServerSpec("sim", env=(("LOADGEN_TEST_ENV", "7"),)))
    assert prof.deterministic and prof.default_boots_per_arm == 1  # still the sim's
    assert profile_for(ServerSpec("sim")).extra_env == ()  # the kind's own is untouched
    with launch_sync(prof, log_dir=tmp_path, served_name="m") as server:
        environ = Path(f"/proc/{server.pid}/environ").read_bytes().split(b"\0")
    assert b"LOADGEN_TEST_ENV=7" in environ
