"""Sweeps that boot a server per arm and boot: order, records, cache probes, the floor."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from loadgen.analysis.sweep_boots import boot_points, floor_rows
from loadgen.analysis.sweep_types import read_sweep
from loadgen.engine.boots import arm_run_dir, boot_order, flag_groups, run_boots
from loadgen.engine.run import RunOptions, run_plan
from loadgen.report.cmd import write_report
from loadgen.report.sweep_plot import booted_points, sweep_figure
from loadgen.scenario.load import load_scenario
from loadgen.scenario.plan import plan

from support.paths import DATA

SCENARIOS = DATA / "scenarios"


def test_rounds_interleave_the_arms() -> None:
    assert boot_order(3, 2) == [(0, 1), (1, 1), (2, 1), (0, 2), (1, 2), (2, 2)]


@pytest.mark.parametrize("seed", range(40))
def test_a_seeded_shuffle_never_boots_one_arm_twice_in_a_row(seed: int) -> None:
    order = boot_order(3, 4, seed)
    groups = [g for g, _ in order]
    assert all(a != b for a, b in itertools.pairwise(groups))
    for boot in range(1, 5):
        assert sorted(g for g, b in order if b == boot) == [0, 1, 2]


def test_two_arms_with_a_seed_still_alternate() -> None:
    groups = [g for g, _ in boot_order(2, 5, seed=7)]
    assert all(a != b for a, b in itertools.pairwise(groups))


def test_client_side_arms_share_a_boot(tmp_path: Path) -> None:
    text = (SCENARIOS / "sweep_boots.yaml").read_text()
    path = tmp_path / "two_axes.yaml"
    path.write_text(text.replace("sweep:\n", "sweep:\n  groups.minnows.count: [1, 2]\n"))
    scenario = load_scenario(path)
    groups = flag_groups(plan(scenario).arms)
    assert [g.flags for g in groups] == [
        {"max_num_batched_tokens": 128},
        {"max_num_batched_tokens": 2048},
    ]
    assert [len(g.arms) for g in groups] == [2, 2]


def test_one_boot_keeps_the_arm_layout_more_get_a_directory_each(tmp_path: Path) -> None:
    assert arm_run_dir(tmp_path, "a", 1, 1) == tmp_path / "arms" / "a"
    assert arm_run_dir(tmp_path, "a", 2, 2) == tmp_path / "arms" / "a.boot2"


def test_points_and_floor_from_boot_records() -> None:
    boots = [
        {"order": 1, "boot": 1, "arms": ["a"], "status": "measured",
         "runs": [{"arm": "a", "dir": "arms/a.boot1"}]},
        {"order": 2, "boot": 1, "arms": ["b"], "status": "measured",
         "runs": [{"arm": "b", "dir": "arms/b.boot1"}]},
        {"order": 3, "boot": 2, "arms": ["a"], "status": "measured",
         "runs": [{"arm": "a", "dir": "arms/a.boot2"}]},
        {"order": 4, "boot": 2, "arms": ["b"], "status": "cache_dead", "attempts": [{}, {}]},
    ]  # fmt: skip

    def entry(wall: float) -> dict:
        return {"row": None, "wall_s": wall, "groups": {}}

    entries = {"a.boot1": entry(10.0), "b.boot1": entry(20.0), "a.boot2": entry(11.0)}
    points = boot_points(boots, entries)
    assert [(p["arm"], p["status"], p["values"]) for p in points] == [
        ("a", "measured", {"wall_s": 10.0}),
        ("b", "measured", {"wall_s": 20.0}),
        ("a", "measured", {"wall_s": 11.0}),
        ("b", "cache_dead", None),
    ]
    (row,) = floor_rows(points, ["a", "b"])
    # b has one measured boot: no floor of its own, so none at all.
    assert row["effect"] == pytest.approx(20.0 / 10.5 - 1)
    assert row["verdict"] == "unresolved by construction"


def booted(points: list[dict]) -> dict:
    """A sweep parent's summary holding only boots (its arms' entries do not draw them)."""
    return {"arms": {}, "boots": points}


def test_plot_x_is_the_flag_value_or_the_arm() -> None:
    def point(arm: str, flags: dict, order: int) -> dict:
        return {"arm": arm, "flags": flags, "order": order, "boot": 1, "status": "measured",
                "attempts": 1, "values": {"wall_s": 1.0}}  # fmt: skip

    numeric = [point("a", {"budget": 512}, 1), point("b", {"budget": 2048}, 2)]
    axis, points, ticks = booted_points(read_sweep(booted(numeric)))
    assert (axis, [p.x for p in points], ticks) == ("budget", [512.0, 2048.0], None)
    literal = [point("x", {"--fault": "cache_dead"}, 1), point("y", {"--fault": "stall=0"}, 2)]
    axis, points, ticks = booted_points(read_sweep(booted(literal)))
    assert (axis, [p.x for p in points], ticks) == ("arm", [0.0, 1.0], {0.0: "x", 1.0: "y"})
    assert sweep_figure(read_sweep(booted(numeric))).startswith(b"\x89PNG")
    assert sweep_figure(read_sweep(booted([{**numeric[0], "values": None}]))) is None
    # A metric no boot measured (minnows that never decoded during the whale's prefill).
    # Two boots per arm on a log-scaled x axis (the real vLLM sweep's shape).
    wide = [point(arm, {"budget": b}, order) | {"boot": boot}
            for order, (arm, b, boot) in enumerate(
                [("a", 256, 1), ("b", 4096, 1), ("a", 256, 2), ("b", 4096, 2)], 1)]  # fmt: skip
    unmeasured = [{**p, "values": {"wall_s": 1.0, "minnow_decode_during_tok_s": None}}
                  for p in wide]  # fmt: skip
    assert sweep_figure(read_sweep(booted(unmeasured))).startswith(b"\x89PNG")


async def run(path: Path, out: Path, *sets: str) -> Path:
    scenario = load_scenario(path, list(sets))
    opts = RunOptions(out_root=out, progress=False)
    return await run_plan(plan(scenario), opts, warn=lambda m: None)


def manifest(path: Path) -> dict:
    return orjson.loads((path / "run.json").read_bytes())


async def test_two_boots_per_arm_interleaved_with_records_and_floor(tmp_path: Path) -> None:
    root = await run(SCENARIOS / "sweep_boots.yaml", tmp_path)
    m = manifest(root)
    assert m["boots_per_arm"] == 2 and m["interrupted"] is False
    boots = m["boots"]
    assert [(b["flags"]["max_num_batched_tokens"], b["boot"]) for b in boots] == [
        (128, 1), (2048, 1), (128, 2), (2048, 2)
    ]  # fmt: skip
    pids = {b["attempts"][0]["pid"] for b in boots}
    assert len(pids) == 4  # a fresh process per boot
    for b in boots:
        (attempt,) = b["attempts"]
        assert b["status"] == attempt["status"] == "measured"
        assert (root / attempt["boot_log"]).is_file()
        assert attempt["facts"]["max_num_batched_tokens"] == b["flags"]["max_num_batched_tokens"]
        assert attempt["version"].endswith("loadgen-sim")
        assert attempt["environment"]["mismatched"] == []
        assert attempt["served_before_measure"] == 2  # the readiness token and the warm-up
        assert "probe" not in attempt  # salted prompts: no cache probe
        run_json = manifest(root / b["runs"][0]["dir"])
        assert run_json["boot"]["order"] == b["order"]
        assert run_json["boot"]["warm_state"]["boot_of_this_arm"] == b["boot"]
        # The sim keeps no caches of its own: nothing to inherit from an earlier boot.
        assert attempt["warm_state"]["state_dir"].endswith("state/sim")
        assert attempt["warm_state"]["state_inherited"] is False
    write_report(root)
    summary = orjson.loads((root / "summary.json").read_bytes())
    metrics = [r["metric"] for r in summary["boot_floor"]]
    assert metrics == ["whale_ttft_s", "minnow_ttft_s", "minnow_decode_during_tok_s", "wall_s"]
    # The scenario measures every metric in every boot by construction (see its description).
    for point in summary["boots"]:
        assert all(v is not None and v > 0 for v in point["values"].values()), point
    for r in summary["boot_floor"]:
        assert r["floor"] is not None
        assert r["verdict"] in ("stands", "unresolved")
        assert r["verdict"] == ("stands" if r["multiple"] is None or r["multiple"] > 2 else
                                "unresolved")  # fmt: skip
    # Budget 128 splits the whale's prefill into ~48 steps, 2048 into 3: its TTFT falls by
    # 83% on an idle host, where the boots agree within 0.5% and the effect stands ~170x its
    # floor. On a starved host (a ceiling bench beside it on 2 cores) a boot's whale waited
    # twice as long: the effect -0.65, a floor of 1.0, and `unresolved` the right verdict, so
    # the verdict is held to its rule above (tests/analysis/test_bootfloor.py pins it both
    # ways). The 48 paced steps take ~1 s whatever the host: budget 2048's whale would have
    # to wait 0.5 s more in both its boots to cut the fall below 30%.
    whale = summary["boot_floor"][0]
    assert whale["effect"] < -0.3
    assert "Arms over boots, with the boot-floor verdict" in (root / "report.txt").read_text()
    assert (root / "sweep.png").read_bytes().startswith(b"\x89PNG")
    assert "<h2>Across the sweep</h2><img" in (root / "report.html").read_text()


async def test_a_cache_dead_boot_is_restarted_once_then_reported(tmp_path: Path) -> None:
    root = await run(SCENARIOS / "sweep_cache_dead.yaml", tmp_path)
    dead, healthy = manifest(root)["boots"]
    assert dead["flags"] == {"--fault": "cache_dead"}
    assert dead["status"] == "cache_dead" and "runs" not in dead
    assert [a["status"] for a in dead["attempts"]] == ["cache_dead", "cache_dead"]
    assert dead["attempts"][0]["pid"] != dead["attempts"][1]["pid"]
    for attempt in dead["attempts"]:
        assert attempt["probe"]["warm"] is False
        assert attempt["probe"]["hits_delta"] == 0
        assert (attempt["probe"]["verdict"], attempt["probe"]["decided_by"]) == ("dead", "counters")
        assert attempt["probe"]["probe_tokens"] >= 10 * attempt["probe"]["block_size"]
    assert healthy["status"] == "measured"
    (ok,) = healthy["attempts"]
    assert ok["probe"]["warm"] is True and ok["probe"]["hits_delta"] > 0
    assert (ok["probe"]["verdict"], ok["probe"]["answers_match"]) == ("healthy", True)
    assert not (root / "arms" / "--fault=cache_dead").exists()
    write_report(root)
    report = (root / "report.txt").read_text()
    assert "--fault=cache_dead" in report and "cache_dead" in report


def alive(pid: int) -> bool:
    """Whether the process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_ctrl_c_during_a_sweep_leaves_no_server_running(tmp_path: Path) -> None:
    # Long minnow outputs keep the first boot measuring when SIGINT arrives.
    sets = ["groups.minnows.max_tokens=4000", "sim.max_model_len=8192", "sim.profile=default"]
    cmd = [sys.executable, "-m", "loadgen", "run", str(SCENARIOS / "sweep_boots.yaml"),
           "--out", str(tmp_path), "--no-progress", *[f"--set={s}" for s in sets]]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        pid = wait_for_measuring_pid(tmp_path, proc, timeout_s=120)
        assert alive(pid)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, proc.stderr.read().decode() if proc.stderr else ""
    assert not alive(pid)
    (run_json,) = tmp_path.glob("*/run.json")
    parent = orjson.loads(run_json.read_bytes())
    assert parent["interrupted"] is True
    assert parent["boots"][0]["status"] == "measuring"


def wait_for_measuring_pid(out: Path, proc: subprocess.Popen, timeout_s: float) -> int:
    """The pid of the first boot once it is being measured (read from the sweep's run.json)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "loadgen exited before the first boot was measured"
        for run_json in out.glob("*/run.json"):
            try:
                boots = orjson.loads(run_json.read_bytes()).get("boots") or []
            except orjson.JSONDecodeError:
                continue  # caught mid-write
            if boots and boots[0]["status"] == "measuring":
                return int(boots[0]["attempts"][0]["pid"])
        time.sleep(0.1)  # a poll of a file another process writes; the condition is re-checked
    raise AssertionError(f"no boot measuring within {timeout_s} s")


def test_pid_check_sees_this_process() -> None:
    assert alive(os.getpid())


async def test_a_crash_inside_a_boot_stops_that_server(tmp_path: Path) -> None:
    scenario = load_scenario(SCENARIOS / "sweep_boots.yaml")
    seen: list[int] = []

    async def crashing_arm(arm, path, target, boot) -> None:
        seen.append(boot["pid"])
        assert alive(boot["pid"])
        raise RuntimeError("loadgen bug")

    opts = RunOptions(out_root=tmp_path, progress=False)
    with pytest.raises(RuntimeError, match="loadgen bug"):
        await run_boots(plan(scenario), tmp_path, opts, lambda m: None, crashing_arm,
                        lambda boots, n: None)  # fmt: skip
    (pid,) = seen
    assert not alive(pid)
