"""Item 17 of issue #10: known limits and launch flags of an external server, from the user."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from loadgen.cli import main
from loadgen.report.cmd import write_report
from loadgen.server.user_facts import parse_server_facts, parse_server_flags
from loadgen.sim.server import start_sim_server

from support.sim import SMALL, small_sim_config

VALID = (
    "valid keys: block_size, num_gpu_blocks, kv_cache_tokens, max_num_batched_tokens, "
    "max_num_seqs, max_model_len, num_speculative_tokens"
)


def test_server_facts_parse_lists_and_repeats():
    assert parse_server_facts(["max_num_seqs=4,max_num_batched_tokens=512", "block_size=16"]) == {
        "max_num_seqs": 4,
        "max_num_batched_tokens": 512,
        "block_size": 16,
    }
    assert parse_server_flags(["--max-num-seqs 4", "--enable-prefix-caching"]) == [
        "--max-num-seqs", "4", "--enable-prefix-caching",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("max_num_seq=4", f"--server-facts max_num_seq=4: unknown key 'max_num_seq'; {VALID}"),
        ("max_num_seqs=four", f"--server-facts max_num_seqs=four: max_num_seqs must be a whole "
                              f"number >= 1; {VALID}"),
        ("max_num_seqs=0", f"--server-facts max_num_seqs=0: max_num_seqs must be a whole number"
                           f" >= 1; {VALID}"),
        ("max_num_seqs", f"--server-facts max_num_seqs: not KEY=VALUE; {VALID}"),
    ],
)  # fmt: skip
def test_bad_server_facts_are_one_line_errors(arg: str, message: str):
    with pytest.raises(ValueError) as err:
        parse_server_facts([arg])
    assert str(err.value) == message
    result = CliRunner().invoke(
        main, ["run", "whale_c4", "--base-url", "http://127.0.0.1:9", "--server-facts", arg]
    )
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == f"Error: {message}"
    assert "Traceback" not in result.output


def test_server_facts_need_an_external_server():
    result = CliRunner().invoke(main, ["run", "whale_c4", "--server-facts", "max_num_seqs=4"])
    assert result.exit_code == 2
    assert "describe an external server: pass --base-url too" in result.output


async def _cli(*args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "loadgen", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0, err.decode()[-2000:]
    return out.decode()


async def test_user_facts_set_the_cap_and_flags_tell_arms_apart(tmp_path: Path):
    sets = [a for s in SMALL for a in ("--set", s)]
    runs = []
    async with start_sim_server(small_sim_config()) as sim:
        for name, budget in (("a", 512), ("b", 2048)):
            await _cli(
                "run", "whale_c4", "--base-url", sim.url, "--out", str(tmp_path / name),
                "--no-progress", *sets,
                "--server-facts", f"max_num_seqs=4,max_num_batched_tokens={budget}",
                "--server-flags", f"--max-num-seqs 4 --max-num-batched-tokens {budget}",
            )  # fmt: skip
            (run_dir,) = (tmp_path / name).iterdir()
            runs.append(run_dir)
    manifest = orjson.loads((runs[0] / "run.json").read_bytes())
    assert manifest["target"]["flags"] == ["--max-num-seqs", "4", "--max-num-batched-tokens", "512"]
    assert manifest["server"]["max_num_seqs"] == 4
    assert manifest["server"]["sources"]["max_num_seqs"] == "user"
    report = write_report(runs[0])
    summary = orjson.loads((runs[0] / "summary.json").read_bytes())
    assert summary["run"]["cap"] == {"value": 4, "source": "user"}
    assert "cap 4 (user)" in report
    assert "server flags (user): --max-num-seqs 4 --max-num-batched-tokens 512" in report
    assert "server facts (user): max_num_batched_tokens=512, max_num_seqs=4" in report
    compared = await _cli("compare", str(runs[0]), str(runs[1]))
    assert "--max-num-batched-tokens 512" in compared
    assert "--max-num-batched-tokens 2048" in compared
