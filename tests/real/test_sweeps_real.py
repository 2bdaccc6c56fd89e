"""Server-flag sweeps on real servers: 2 arms x 2 boots, interleaved, each boot a fresh server
with its boot log, environment read back from /proc, cache probe and the boot-floor verdicts in
the run directory. vLLM sweeps --max-num-batched-tokens; llama-server its own -ub."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from loadgen.engine.run import RunOptions, run_plan
from loadgen.report.cmd import write_report
from loadgen.scenario.load import load_scenario
from loadgen.scenario.plan import plan
from loadgen.server.spec import ServerSpec

from support.paths import DATA
from support.real import note, tiny_model

pytestmark = pytest.mark.real

SWEEP = DATA / "scenarios" / "real_sweep.yaml"


async def sweep(tmp_path: Path, spec: ServerSpec, axis: str) -> tuple[Path, dict, dict]:
    text = SWEEP.read_text() + f"sweep:\n  {axis}\n  boots_per_arm: 2\n"
    scenario_path = tmp_path / "sweep.yaml"
    scenario_path.write_text(text)
    opts = RunOptions(out_root=tmp_path / "runs", progress=False, server=spec)
    root = await run_plan(plan(load_scenario(scenario_path)), opts, warn=print)
    write_report(root)
    manifest = orjson.loads((root / "run.json").read_bytes())
    summary = orjson.loads((root / "summary.json").read_bytes())
    return root, manifest, summary


def assert_interleaved_boots(root: Path, manifest: dict, key: str, values: list) -> None:
    boots = manifest["boots"]
    assert [(b["flags"][key], b["boot"]) for b in boots] == [
        (values[0], 1), (values[1], 1), (values[0], 2), (values[1], 2)
    ]  # fmt: skip
    assert len({b["attempts"][-1]["pid"] for b in boots}) == 4
    for b in boots:
        attempt = b["attempts"][-1]
        assert b["status"] == "measured", b
        assert (root / attempt["boot_log"]).stat().st_size > 0
        assert attempt["environment"]["read_back"] is not None
        assert attempt["environment"]["mismatched"] == []
        assert attempt["version"]


def assert_floor_verdicts(summary: dict) -> None:
    """Every boot's minnows met the whale's prefill, so whale TTFT, minnow TTFT and wall have a
    floor on every arm; decode during the prefill is missing where an arm's whale prefilled in
    one step and every minnow queued behind it."""
    for point in summary["boots"]:
        figures = [point["values"][k] for k in ("whale_ttft_s", "minnow_ttft_s", "wall_s")]
        assert None not in figures, point
    rows = summary["boot_floor"]
    assert [r["metric"] for r in rows] == [
        "whale_ttft_s", "minnow_ttft_s", "minnow_decode_during_tok_s", "wall_s"
    ]  # fmt: skip
    for r in rows:
        if r["metric"] == "minnow_decode_during_tok_s" and r["verdict"] == "missing":
            continue
        assert r["verdict"] in ("stands", "unresolved"), r
        assert r["floor"] is not None


def note_verdicts(name: str, summary: dict) -> None:
    for r in summary["boot_floor"]:
        multiple = "-" if r["multiple"] is None else f"{r['multiple']:.1f}x"
        effect = "-" if r["effect"] is None else f"{100 * r['effect']:+.1f}%"
        floor = "-" if r["floor"] is None else f"{100 * r['floor']:.1f}%"
        note(f"{name} {r['metric']} {r['arm']} vs {r['reference']}",
             f"{effect}, floor {floor}, {multiple}: {r['verdict']}")  # fmt: skip


async def test_vllm_budget_sweep_two_boots_per_arm(tmp_path: Path) -> None:
    spec = ServerSpec(
        "vllm", ("--enable-prefix-caching", "--max-model-len", "8192"), tiny_model("vllm")
    )
    root, manifest, summary = await sweep(tmp_path, spec, "max_num_batched_tokens: [256, 4096]")
    assert_interleaved_boots(root, manifest, "max_num_batched_tokens", [256, 4096])
    for b in manifest["boots"]:
        attempt = b["attempts"][-1]
        env = attempt["environment"]["read_back"]
        assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
        assert env["OMP_NUM_THREADS"] == "1"
        assert attempt["facts"]["max_num_batched_tokens"] == b["flags"]["max_num_batched_tokens"]
        probe = attempt["probe"]
        assert probe["block_size"] == 32
        assert probe["probe_tokens"] >= 10 * probe["block_size"]
        assert probe["warm"] is True, probe
        note(f"vllm boot {b['order']} probe", probe["reason"])
        note(f"vllm boot {b['order']} boot time", f"{attempt['boot_s']:.1f} s")
    assert_floor_verdicts(summary)
    note_verdicts("vllm", summary)


async def test_llama_server_ubatch_sweep_two_boots_per_arm(tmp_path: Path) -> None:
    spec = ServerSpec("llama.cpp", ("-b", "2048"), tiny_model("llama.cpp"))
    root, manifest, summary = await sweep(tmp_path, spec, '"-ub": [64, 512]')
    assert_interleaved_boots(root, manifest, "-ub", [64, 512])
    for b in manifest["boots"]:
        attempt = b["attempts"][-1]
        argv = attempt["argv"]
        assert argv[argv.index("-ub") + 1] == str(b["flags"]["-ub"])
        # llama-server has no KV blocks: no probe can be sized, and the record says so.
        assert attempt.get("probe") is None
    assert_floor_verdicts(summary)
    note_verdicts("llama.cpp", summary)
