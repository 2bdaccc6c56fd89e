"""A fitted profile file wherever a sim profile is named: `--sim-profile` on the virtual clock
applies its costs and its facts (a sweep's flag and --set still win), the wall-clock sim boots
from it, a bad file is one line naming the field, and `loadgen fidelity` tells a right profile
from a wrong one."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from loadgen.analysis.fidelity import fidelity_table
from loadgen.cli import main
from loadgen.codec import to_json
from loadgen.report.fidelity_report import fidelity_line
from loadgen.sim.profile_file import (
    FittedProfile,
    ProfileFileError,
    load_profile_file,
    write_profile_file,
)
from loadgen.sim.profiles import sim_profile

from support.cli import loadgen, rewrites_identically
from support.paths import REPO

SMOKE = REPO / "scenarios" / "smoke.yaml"
SLOWED = 10.0


def _profile(path: Path, *, factor: float = 1.0, overhead: float = 0.0, **facts: int) -> Path:
    step = sim_profile("tiny").scaled("tiny-copy", factor)
    write_profile_file(path, FittedProfile("tiny-copy", step, overhead, facts))
    return path


def _summary(out: Path) -> dict:
    [root] = list(out.iterdir())
    return orjson.loads((root / "summary.json").read_bytes())


def _run(out: Path, *args: str | Path) -> dict:
    proc = loadgen("run", SMOKE, "--clock", "virtual", "--seed", "3", "--out", out,
                   "--no-progress", *args)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return _summary(out)


def test_a_profiles_overhead_and_facts_reach_the_virtual_clock(tmp_path: Path) -> None:
    base = _run(tmp_path / "base")
    slow = _profile(tmp_path / "p.yaml", overhead=0.25, max_num_seqs=2)
    got = _run(tmp_path / "prof", "--sim-profile", slow)
    # Every request waits the overhead before it is scheduled: TTFT grows by at least that, and
    # two seats instead of four queue two of the four streams.
    for group in ("long", "short"):
        delta = got["groups"][group]["ttft_s"]["median"] - base["groups"][group]["ttft_s"]["median"]
        assert delta >= 0.25 - 1e-9
    assert got["run"]["cap"] == {"source": "sim", "value": 2}
    # --set after the profile wins over its fact.
    again = _run(tmp_path / "set", "--sim-profile", slow, "--set", "sim.max_num_seqs=3")
    assert again["run"]["cap"]["value"] == 3
    [root] = list((tmp_path / "prof").iterdir())
    manifest = orjson.loads((root / "run.json").read_bytes())
    assert manifest["sim_profile"]["name"] == "tiny-copy"
    assert len(manifest["sim_profile"]["sha256"]) == 64


def test_the_same_costs_as_a_file_give_the_same_run(tmp_path: Path) -> None:
    # The file copies the scenario's own card and facts: the summary is the built-in's.
    copy = _profile(tmp_path / "copy.yaml", max_num_seqs=4, max_num_batched_tokens=256,
                    block_size=16, num_gpu_blocks=1024, max_model_len=1024)  # fmt: skip
    a = _run(tmp_path / "a")
    b = _run(tmp_path / "b", "--sim-profile", copy)
    assert a["groups"] == b["groups"]


def test_a_bad_profile_is_one_line_naming_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("loadgen_sim_profile: 1\ncosts: {fixed_s: -1, per_token_s: 0, "
                   "decode_ctx_s: 0, prefill_ctx_s: 0}\n")  # fmt: skip
    for args in (("run", SMOKE, "--clock", "virtual", "--sim-profile", bad),
                 ("sim", "--profile", bad, "--port", "0")):  # fmt: skip
        proc = loadgen(*args)
        assert proc.returncode != 0 and "Traceback" not in proc.stderr
        assert "costs.fixed_s: expected seconds >= 0, got -1" in proc.stderr
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SMOKE.read_text().replace("profile: tiny", "profile: bad.yaml"))
    proc = loadgen("validate", scenario)
    assert proc.returncode != 0 and "sim.profile" in proc.stdout + proc.stderr
    proc = loadgen("run", SMOKE, "--sim-profile", bad, "--base-url", "http://127.0.0.1:9/v1")
    assert proc.returncode != 0 and "--sim-profile configures the built-in sim" in proc.stderr


@pytest.mark.parametrize(("value", "shown"), [(".nan", "nan"), (".inf", "inf")])
def test_a_cost_that_is_no_finite_number_is_refused_in_one_line(
    tmp_path: Path, value: str, shown: str
) -> None:
    # NaN and inf passed `< 0` and the sim's first step raised a traceback.
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"loadgen_sim_profile: 1\ncosts: {{fixed_s: {value}, per_token_s: 0, "
                   "decode_ctx_s: 0, prefill_ctx_s: 0}\n")  # fmt: skip
    with pytest.raises(
        ProfileFileError, match=rf"costs\.fixed_s: expected seconds >= 0, got {shown}"
    ):
        load_profile_file(bad)
    bad.write_bytes(b"\xff\xfe")
    with pytest.raises(ProfileFileError, match=r"bad\.yaml: not UTF-8 text"):
        load_profile_file(bad)


def test_the_fidelity_table_is_exact() -> None:
    real = {"-": {"groups": {"g": {"n": 2, "ok": 2, "ttft_s": {"median": 2.0, "p90": 4.0},
                                   "decode_tok_s": {"median": 100.0},
                                   "verdicts": {"admitted": 2}}},
                  "run": {"reps_wall_s": 10.0}}}  # fmt: skip
    virtual = {"-": {"groups": {"g": {"n": 2, "ok": 2, "ttft_s": {"median": 2.2, "p90": 4.0},
                                      "decode_tok_s": {"median": 50.0},
                                      "verdicts": {"admitted": 2}}},
                     "run": {"reps_wall_s": 9.0}}}  # fmt: skip
    t = fidelity_table(real, virtual, 0.15)
    assert t.unlike == () and "!!" not in fidelity_line(t)
    # A measured side with failed streams was scored as like for like, and said nothing.
    real["-"]["groups"]["g"]["ok"] = 1
    cut = fidelity_table(real, virtual, 0.15)
    assert cut.unlike == ("arm -: group g: measured 1 ok of 2, predicted 2 ok of 2",)
    assert fidelity_line(cut).endswith(
        "\n!! arm -: group g: measured 1 ok of 2, predicted 2 ok of 2: its errors stand on "
        "other streams"
    )
    real["-"]["groups"]["g"]["ok"] = 2
    errors = {r.metric: (r.error, r.within) for r in t.rows}
    assert errors == {
        "ttft_median_s": (0.1, True), "ttft_p90_s": (0.0, True),
        "decode_median_tok_s": (-0.5, False), "reps_wall_s": (-0.1, True),
    }  # fmt: skip
    assert (t.figures, t.within, t.verdicts_agree) == (4, 3, 1)
    assert t.unmatched == ()
    # fidelity.json holds the derived error, judgement and counts beside the figures.
    j = to_json(t)
    assert (j["figures"], j["within"], j["verdicts_agree"]) == (4, 3, 1)
    assert j["rows"][0] == {
        "arm": "-", "group": "g", "metric": "ttft_median_s", "label": "TTFT median",
        "unit": "s", "measured": 2.0, "predicted": 2.2, "error": 0.1, "within": True,
    }  # fmt: skip


def test_each_boot_of_an_arm_meets_the_arms_one_prediction() -> None:
    def summary(wall: float) -> dict:
        return {"groups": {}, "run": {"reps_wall_s": wall}}

    real = {"n=1.boot1": summary(10.0), "n=1.boot2": summary(12.0), "n=9.boot1": summary(1.0)}
    t = fidelity_table(real, {"n=1": summary(11.0)}, 0.05)
    walls = [(r.arm, r.error, r.within) for r in t.rows]
    assert walls == [("n=1.boot1", 0.1, False), ("n=1.boot2", -0.0833, False)]
    # An arm with no prediction is named, never dropped in silence.
    assert t.unmatched == ("n=9.boot1",)
    assert "no prediction for arm(s) n=9.boot1" in fidelity_line(t)


@pytest.mark.parametrize(("factor", "close"), [(1.0, True), (3.0, False)])
def test_fidelity_tells_a_right_profile_from_a_wrong_one(
    tmp_path: Path, factor: float, close: bool
) -> None:
    # The launched sim runs smoke on `tiny` slowed tenfold (20 ms steps: on a busy machine the
    # HTTP path's millisecond of jitter was half a 2 ms step, and a right profile read +54%).
    # The checked profile copies that card, or triples it.
    scenario = tmp_path / "smoke.yaml"
    scenario.write_text(SMOKE.read_text().replace("profile: tiny", "profile: served.yaml"))
    _profile(tmp_path / "served.yaml", factor=SLOWED)
    profile = _profile(tmp_path / "p.yaml", factor=SLOWED * factor)
    proc = loadgen("fidelity", scenario, "--sim-profile", profile, "--server", "sim", "--out",
                   tmp_path / "f", "--seed", "3")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    # The measured side is named as what it was: the built-in sim, never "the real server".
    notes = " ".join(proc.stdout.split())
    assert "measured: the built-in sim (wall clock, over HTTP);" in notes
    assert "real server" not in notes
    [root] = list((tmp_path / "f").iterdir())
    table = orjson.loads((root / "fidelity.json").read_bytes())
    decode = [r["error"] for r in table["rows"] if r["metric"] == "decode_median_tok_s"]
    assert len(decode) == 2
    # Tripled step costs: a third of the decode rate (-67%); the copy is within the default
    # tolerance (it read 0.3% with two busy loops on two cores).
    if close:
        assert all(abs(e) < 0.15 for e in decode), table["rows"]
    else:
        assert all(e < -0.5 for e in decode), table["rows"]
    # compare reads the pair and says which side is which.
    [real], [virtual] = ((root / side).iterdir() for side in ("real", "virtual"))
    shown = loadgen("compare", real, virtual)
    assert shown.returncode == 0, shown.stderr
    notes = " ".join(shown.stdout.split())  # the notes wrap at the table's width
    assert "; wall clock, sim" in notes and "; virtual clock, sim profile tiny-copy (" in notes
    assert "B - A is the sim's error with its profile" in notes
    # The file round-trips the card it was written from.
    assert load_profile_file(profile).step == sim_profile("tiny").scaled(
        "tiny-copy", SLOWED * factor
    )
    # Reported again from its two runs, the judgement is the same bytes.
    written = (root / "fidelity.json").read_bytes()
    again = loadgen("report", root)
    assert again.returncode == 0, again.stderr
    assert (root / "fidelity.json").read_bytes() == written
    assert rewrites_identically(root, "report.txt", "report.html", "fidelity.png")


def test_fidelity_on_a_failing_server_says_so_and_exits_as_run_does(tmp_path: Path) -> None:
    # It scored the profile on the streams left and exited 0. (At http500=1 the launched sim
    # does not pass its boot check; the sim draws each stream's faults from its id.)
    profile = _profile(tmp_path / "p.yaml")
    proc = loadgen("fidelity", SMOKE, "--sim-profile", profile, "--server", "sim",
                   "--server-arg=--fault=http500=0.5", "--out", tmp_path / "f",
                   "--seed", "3")  # fmt: skip
    assert proc.returncode == 4, proc.stderr
    assert ("!! arm -: group long: measured 0 ok of 1, predicted 1 ok of 1: its errors stand "
            "on other streams") in proc.stdout  # fmt: skip
    assert proc.stderr.splitlines()[-1] == "Error: 1 of 4 streams failed: http_500 x1"


def test_fidelity_without_a_server_refuses_in_one_line(tmp_path: Path) -> None:
    # With nothing named it measured the built-in sim and called it "the real server": an H200
    # profile then scored 0 of 7 against a sim it was never fitted on.
    profile = _profile(tmp_path / "p.yaml")
    result = CliRunner().invoke(main, ["fidelity", str(SMOKE), "--sim-profile", str(profile),
                                       "--out", str(tmp_path / "f")])  # fmt: skip
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        "Error: fidelity measures a server against the profile's prediction: name it with "
        "--base-url URL or --server KIND (--server sim measures the built-in sim)"
    )
    assert not (tmp_path / "f").exists()


def test_a_fidelity_whose_run_did_not_finish_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    block = {"scenario": "smoke", "tolerance": 0.15, "real": "real/r", "virtual": None,
             "profile": {"path": "p.yaml", "name": "p", "sha256": "0"}}  # fmt: skip
    (tmp_path / "run.json").write_bytes(orjson.dumps({"fidelity": block, "interrupted": True}))
    result = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"Error: {tmp_path}: the fidelity's virtual run did not finish; run `loadgen fidelity` "
        "again"
    )
