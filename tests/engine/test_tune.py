"""`loadgen tune` on the virtual clock: the ranking and each point's binding verdict against a
plain sweep of the same grid (exact), the refusal of a flag a profile cannot predict (both ways),
the coordinate descent past --max-points, and `loadgen report` redrawing a tune directory."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import orjson
import pytest

from loadgen.analysis.slo import parse_slo
from loadgen.analysis.tune import VerifiedPoint, binding, read_tune, server_command, verdict
from loadgen.engine.tune import descent_order
from loadgen.report.tune_report import verdict_lines, verification_line
from loadgen.sim.profile_file import (
    FittedProfile,
    load_profile_file,
    unpredictable,
    write_profile_file,
)
from loadgen.sim.profiles import sim_profile

from support.cli import loadgen
from support.paths import REPO

ROOT = REPO
# Seven minnows admitted first, a whale 50 ms later: the seats cap the minnows (admission_cap
# at 2), the budget sets the whale's chunks.
SCENARIO = """\
name: tune_small
api: chat
seed: 3
arrival: together
groups:
  - name: minnows
    count: 7
    prompt: {tokens: 300, shape: prose, cache: salted}
    max_tokens: 24
  - name: whale
    count: 1
    prompt: {tokens: 3000, shape: prose, cache: salted}
    max_tokens: 8
    start: 0.05
sim:
  profile: tiny
  max_num_seqs: 4
  max_num_batched_tokens: 512
"""
SEARCH = "max_num_batched_tokens=256,1024;max_num_seqs=2,8"
SLO = "ttft_p90=0.05,tpot_p90=10"


def _fitted(path: Path, server: str = "sim", **fit: object) -> Path:
    """The `tiny` card as a file, fitted (so it says) on `server`."""
    write_profile_file(path, FittedProfile(
        "tiny-fit", sim_profile("tiny"), 0.001, {"max_num_seqs": 4},
        fitted_on={"server": server}, fit=dict(fit),
    ))  # fmt: skip
    return path


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(scenario, profile, tune directory) of one tune over a 2 x 2 grid."""
    base = tmp_path_factory.mktemp("tune")
    scenario = base / "tune_small.yaml"
    scenario.write_text(SCENARIO, encoding="utf-8")
    profile = _fitted(base / "fit.yaml")
    proc = loadgen("tune", scenario, "--sim-profile", profile, "--search", SEARCH, "--slo", SLO,
                   "--seed", "9", "--out", base / "runs")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    [root] = (base / "runs").iterdir()
    return scenario, profile, root


def test_the_ranking_is_each_points_own_run_ranked(
    tuned: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    scenario, profile, root = tuned
    # The same grid as a plain sweep on the virtual clock, with the same seed and SLO.
    proc = loadgen("run", scenario, "--clock", "virtual", "--sim-profile", profile, "--seed", "9",
                   "--slo", SLO, "--set", 'sweep={"max_num_batched_tokens": [256, 1024], '
                   '"max_num_seqs": [2, 8]}', "--out", tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    [sweep] = tmp_path.iterdir()
    items = parse_slo(SLO)
    rows = orjson.loads((sweep / "summary.json").read_bytes())["arms"]
    own = {}
    for arm in (sweep / "arms").iterdir():
        summary = orjson.loads((arm / "summary.json").read_bytes())
        goodput = rows[arm.name]["load_row"]["goodput_req_s"]
        own[arm.name] = (goodput, binding(summary, items, arm.name)[0])
    t = read_tune(orjson.loads((root / "summary.json").read_bytes()))
    assert [(p.arm, p.objective, p.binding) for p in t.ranking] == sorted(
        ((arm, g, b) for arm, (g, b) in own.items()), key=lambda r: -(r[1] or 0)
    )
    bindings = {(p.flags["max_num_seqs"], p.binding) for p in t.ranking}
    # Two seats hold back five of the seven minnows: the cap binds; eight seats meet the SLO.
    assert bindings == {(2, "admission_cap"), (8, "meets")}
    assert t.pick is not None and t.pick.flags["max_num_seqs"] == 8


def test_tune_prints_a_line_per_point_and_the_pick(tuned: tuple[Path, Path, Path]) -> None:
    _, _, root = tuned
    text = (root / "report.txt").read_text()
    assert "admission_cap" in text and "pick: " in text
    assert (root / "tune.png").stat().st_size > 0


def test_an_unverified_pick_says_which_points_it_leads_by_less_than_one_percent(
    tuned: tuple[Path, Path, Path],
) -> None:
    t = read_tune(orjson.loads((tuned[2] / "summary.json").read_bytes()))
    best, runner_up, *rest = t.ranking
    assert best.objective and not any("within 1%" in line for line in verdict_lines(t))

    def with_second(share: float) -> list[str]:
        second = dataclasses.replace(runner_up, objective=best.objective * share)
        return verdict_lines(dataclasses.replace(t, ranking=(best, second, *rest)))

    # 3.695 against 3.691 was a pick with nothing said: a tie a server's boots can reverse.
    assert with_second(0.995)[-1] == (
        f"note: 1 other point(s) within 1% of the pick's goodput ({runner_up.arm}): a tie on "
        "the virtual clock, which a server's boot-to-boot spread can reverse; --verify N runs "
        "the top N on the server"
    )
    assert not any("within 1%" in line for line in with_second(0.98))


def test_report_redraws_a_tune_directory_byte_identically(
    tuned: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    _, _, root = tuned
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    for name in ("summary.json", "report.txt", "tune.png", "report.html"):
        (copy / name).unlink()
    proc = loadgen("report", copy)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ("summary.json", "report.txt", "tune.png", "report.html"):
        assert (copy / name).read_bytes() == (root / name).read_bytes(), name


def test_a_built_in_profile_predicts_every_sim_flag() -> None:
    for flag in ("max_num_batched_tokens", "max_num_seqs", "num_speculative_tokens"):
        assert unpredictable(sim_profile("tiny"), flag) is None


def test_a_one_budget_fit_without_a_record_of_its_boots_is_refused_the_budget() -> None:
    shipped = load_profile_file(ROOT / "profiles" / "vllm-cpu-tiny.yaml")
    reason = unpredictable(shipped, "max_num_batched_tokens")
    assert reason is not None and reason.startswith("max_num_batched_tokens: ")
    assert "max_num_batched_tokens=512" in reason and "--server KIND" in reason
    # Its decode batches and cached prefixes were probed on that one boot.
    assert unpredictable(shipped, "max_num_seqs") is None
    assert unpredictable(shipped, "enable_prefix_caching") is None
    assert unpredictable(shipped, "num_speculative_tokens") is not None


def test_a_fit_across_budgets_predicts_the_budget_unless_it_could_not_separate(
    tmp_path: Path,
) -> None:
    def fit(boots: list[int], unseparated: list[str]) -> FittedProfile:
        # The shape calibrate writes (engine/calibrate.py _boot_record): flags as words.
        fitted_boots = tuple(
            {"flags": ["--max-num-batched-tokens", str(b)], "max_num_batched_tokens": b,
             "max_num_seqs": 4, "mode": "graph", "costs": ["fixed_s", "per_token_s"]}
            for b in boots
        )  # fmt: skip
        path = tmp_path / "p.yaml"
        write_profile_file(path, dataclasses.replace(
            load_profile_file(_fitted(path, server="vllm")), fitted_boots=fitted_boots,
            unseparated=tuple(unseparated)))  # fmt: skip
        return load_profile_file(path)

    assert unpredictable(fit([512, 2048], []), "max_num_batched_tokens") is None
    assert unpredictable(fit([512, 2048], []), "long_prefill_token_threshold") is None
    one = unpredictable(fit([512], []), "max_num_batched_tokens")
    assert one is not None and "one max_num_batched_tokens (512)" in one
    mixed = unpredictable(fit([512, 2048], ["per_token_s"]), "max_num_batched_tokens")
    assert mixed is not None and "per_token_s" in mixed
    assert unpredictable(fit([512, 2048], ["per_token_s"]), "max_num_seqs") is None
    assert unpredictable(fit([512, 2048], ["decode_token_s"]), "max_num_seqs") is not None


def test_a_fit_on_the_sim_predicts_the_budget(tmp_path: Path) -> None:
    assert unpredictable(load_profile_file(_fitted(tmp_path / "s.yaml")), "max_num_seqs") is None
    on_sim = load_profile_file(_fitted(tmp_path / "s.yaml"))
    assert unpredictable(on_sim, "max_num_batched_tokens") is None
    on_vllm = load_profile_file(_fitted(tmp_path / "v.yaml", server="vllm"))
    assert unpredictable(on_vllm, "max_num_batched_tokens") is not None


def test_tune_refuses_a_flag_the_profile_cannot_predict_in_one_line(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO, encoding="utf-8")
    shipped = ROOT / "profiles" / "vllm-cpu-tiny.yaml"
    proc = loadgen("tune", scenario, "--sim-profile", shipped, "--search", SEARCH, "--slo", SLO,
                   "--out", tmp_path / "runs")  # fmt: skip
    assert proc.returncode == 1
    [line] = proc.stderr.strip().splitlines()
    assert "cannot rank max_num_batched_tokens" in line and "--server KIND" in line
    assert not (tmp_path / "runs").exists()
    # The seats alone it can rank.
    proc = loadgen("tune", scenario, "--sim-profile", shipped, "--search", "max_num_seqs=2,8",
                   "--slo", SLO, "--out", tmp_path / "runs")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_tune_refuses_a_request_past_the_profiles_window_before_a_point_runs(
    tmp_path: Path,
) -> None:
    # The whale (3000 + 8 tokens) past a fitted 2048-token window was an HTTP 400 at every
    # point, and tune ranked the points by the minnows that were left, rc 0.
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO, encoding="utf-8")
    profile = tmp_path / "fit.yaml"
    write_profile_file(profile, FittedProfile(
        "tiny-fit", sim_profile("tiny"), 0.001, {"max_num_seqs": 4, "max_model_len": 2048},
        fitted_on={"server": "sim"},
    ))  # fmt: skip
    proc = loadgen("tune", scenario, "--sim-profile", profile, "--search", SEARCH, "--slo", SLO,
                   "--out", tmp_path / "runs")  # fmt: skip
    refusal = [
        f"Error: groups.whale: prompt 3000 + max_tokens 8 = 3008 tokens exceeds {profile}'s "
        "sim's max_model_len 2048 (expected a smaller prompt or max_tokens)"
    ]
    assert proc.returncode == 1 and proc.stderr.strip().splitlines() == refusal
    assert not (tmp_path / "runs").exists()
    # fidelity said it only after the server's whole run (on a GPU, thrown away).
    proc = loadgen("fidelity", scenario, "--server", "sim", "--sim-profile", profile, "--out",
                   tmp_path / "runs")  # fmt: skip
    assert proc.returncode == 1 and proc.stderr.strip().splitlines() == refusal
    assert not (tmp_path / "runs").exists()


def test_coordinate_descent_finds_the_peak_within_its_budget() -> None:
    peak = (3, 1)

    def value(point: tuple[int, ...]) -> float:
        return -abs(point[0] - peak[0]) - abs(point[1] - peak[1])

    asked: list[tuple[int, ...]] = []

    def value_of(point: tuple[int, ...]) -> float:
        asked.append(point)
        return value(point)

    descent_order([5, 5], value_of, budget=25)
    # From the middle (2, 2): the first axis' line (5), then the second's through (3, 2) (4 new);
    # having moved, a second pass tries the first axis through (3, 1) (4 new) and moves nothing.
    assert max(set(asked), key=value) == peak
    assert len(set(asked)) == 13
    asked.clear()
    descent_order([5, 5], value_of, budget=4)
    assert len(set(asked)) == 4


def _verified(arm: str, *goodput: float) -> VerifiedPoint:
    return VerifiedPoint(arm, {"goodput_req_s": 1.0}, tuple({"goodput_req_s": g} for g in goodput))


def test_the_predicted_best_holds_within_the_boot_floor_and_not_beyond() -> None:
    args = {"kind": "vllm", "arms": {"a": ["--max-num-seqs", "4"], "b": ["--max-num-seqs", "8"]}}
    # b measures 2% above a; the boots of a spread 10%: within the floor, a stands.
    near = verdict((_verified("a", 9.5, 10.5), _verified("b", 10.2, 10.2)), ["a", "b"], "goodput")
    assert (near.measured_best, near.floor, near.holds) == ("b", pytest.approx(0.1), True)
    assert near.gap == pytest.approx(0.2 / 10.2)
    assert server_command(args, near) == "vllm: --max-num-seqs 4"
    # b measures 30% above a, past the 10% floor: the measured best is the one to use.
    far = verdict((_verified("a", 9.5, 10.5), _verified("b", 13.0, 13.0)), ["a", "b"], "goodput")
    assert (far.measured_best, far.holds) == ("b", False)
    assert server_command(args, far) == "vllm: --max-num-seqs 8"
    # One boot each: no floor, no judgement.
    alone = verdict((_verified("a", 10.0), _verified("b", 13.0)), ["a", "b"], "goodput")
    assert alone.floor is None and alone.holds is None
    # The report says which: the best, behind it within the floor, beyond it, or no floor.
    first = verdict((_verified("a", 10.5, 10.5), _verified("b", 9.5, 10.5)), ["a", "b"], "goodput")
    assert first.gap == 0 and first.holds
    assert verification_line(first).startswith("predicted best a is the measured best within")
    assert "the boots cannot tell them apart" in verification_line(near)
    assert "cannot tell" not in verification_line(first) + verification_line(far)
    assert "is NOT the measured best" in verification_line(far)
    assert "cannot be judged against a boot floor" in verification_line(alone)


def test_a_trace_replay_is_tunes_workload_scored_the_same_way(tmp_path: Path) -> None:
    scenario = tmp_path / "trace.yaml"
    scenario.write_text(f"""\
name: trace_tune
seed: 3
groups:
  - name: rows
    prompt: {{}}
arrival:
  trace: {{path: {ROOT / "tests" / "data" / "mooncake_small.jsonl"}}}
sim: {{profile: tiny, block_size: 16, max_num_batched_tokens: 2048, max_model_len: 32768}}
""")
    profile = _fitted(tmp_path / "fit.yaml")
    proc = loadgen("tune", scenario, "--sim-profile", profile, "--search", "max_num_seqs=1,4",
                   "--slo", "ttft_p90=0.1,tpot_p90=50", "--out", tmp_path / "runs")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    [root] = (tmp_path / "runs").iterdir()
    t = read_tune(orjson.loads((root / "summary.json").read_bytes()))
    # Two rows arrive together: one seat holds the second back (the cap binds); four seats
    # admit every row and all meet the SLO, so they rank first.
    assert [(p.flags["max_num_seqs"], p.binding) for p in t.ranking] == [
        (4, "meets"),
        (1, "admission_cap"),
    ]


def test_capacity_as_the_objective_is_each_points_own_capacity_search(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    # A closed loop of the load's seats draws from both groups: no start of the whale's own.
    scenario.write_text(SCENARIO.replace("    start: 0.05\n", ""), encoding="utf-8")
    profile = _fitted(tmp_path / "fit.yaml")
    search = ("--over", "concurrency", "--max", "16", "--seed", "5", "--slo", SLO)
    proc = loadgen("tune", scenario, "--sim-profile", profile, "--search", "max_num_seqs=2,8",
                   "--objective", "capacity", *search, "--out", tmp_path / "tune")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    [root] = (tmp_path / "tune").iterdir()
    t = read_tune(orjson.loads((root / "summary.json").read_bytes()))
    for seats in (2, 8):
        out = tmp_path / f"capacity{seats}"
        proc = loadgen("capacity", scenario, "--clock", "virtual", "--sim-profile", profile,
                       "--set", f"sim.max_num_seqs={seats}", *search, "--out", out)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        [run] = out.iterdir()
        own = orjson.loads((run / "summary.json").read_bytes())["capacity"]
        [point] = [p for p in t.ranking if p.flags == {"max_num_seqs": seats}]
        assert (point.objective, point.binding) == (own["capacity"], own["boundary"]["cause"])
    assert [p.flags["max_num_seqs"] for p in t.ranking] == [8, 2]
    assert "--over" in loadgen("tune", scenario, "--sim-profile", profile, "--search",
                               "max_num_seqs=2,8", "--objective", "capacity", "--slo", SLO,
                               "--out", tmp_path / "x").stderr  # fmt: skip


def test_a_grid_past_max_points_is_searched_by_descent_within_the_bound(
    tuned: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    scenario, profile, _ = tuned
    proc = loadgen("tune", scenario, "--sim-profile", profile, "--search",
                   "max_num_seqs=1,2,4,8,16", "--slo", SLO, "--max-points", "4", "--seed", "9",
                   "--out", tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    [root] = tmp_path.iterdir()
    t = read_tune(orjson.loads((root / "summary.json").read_bytes()))
    assert (t.method, t.grid_points) == ("coordinate_descent", 5)
    # From the middle (4 seats) the one axis' line, cut at 4 points: 1, 2, 4, 8.
    assert sorted(p.flags["max_num_seqs"] for p in t.ranking) == [1, 2, 4, 8]
    assert proc.stderr.count("point ") == 4
