"""`loadgen fidelity --measured RUN_DIR`: a profile scored against a run recorded on the server
before, sending nothing. The recorded run is the measured side as it was (copied, never
rewritten); its seed drives the prediction, so a re-score equals the live comparison."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from loadgen.cli import main
from loadgen.sim.profile_file import FittedProfile, write_profile_file
from loadgen.sim.profiles import sim_profile

from support.cli import loadgen
from support.paths import REPO

SMOKE = REPO / "scenarios" / "smoke.yaml"


def _profile(path: Path, factor: float) -> Path:
    step = sim_profile("tiny").scaled("tiny-copy", factor)
    write_profile_file(path, FittedProfile("tiny-copy", step, 0.0, {}))
    return path


def _only(folder: Path) -> Path:
    [one] = list(folder.iterdir())
    return one


def _files(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A live fidelity of smoke on the launched sim with a right profile: (its root, profile)."""
    tmp = tmp_path_factory.mktemp("live")
    profile = _profile(tmp / "p.yaml", 1.0)
    proc = loadgen("fidelity", SMOKE, "--sim-profile", profile, "--server", "sim", "--out",
                   tmp / "f", "--seed", "3")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return _only(tmp / "f"), profile


def test_a_rescore_of_the_recorded_run_is_the_live_comparison(
    live: tuple[Path, Path], tmp_path: Path
) -> None:
    root, profile = live
    recorded = _only(root / "real")
    before = _files(recorded)
    proc = loadgen("fidelity", SMOKE, "--sim-profile", profile, "--measured", recorded,
                   "--out", tmp_path / "again")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert f"fidelity: real run of smoke recorded in {recorded}" in proc.stderr
    again = _only(tmp_path / "again")
    # Same measured run, same seed, same profile: the same judgement, byte for byte.
    assert (again / "fidelity.json").read_bytes() == (root / "fidelity.json").read_bytes()
    # The recorded run is copied whole into real/ and the original is left as it was.
    assert _files(again / "real" / recorded.name) == before
    assert _files(recorded) == before
    predicted = orjson.loads((_only(again / "virtual") / "run.json").read_bytes())
    assert (predicted["seed"], predicted["seed_source"]) == (3, f"replay:{recorded}")


def test_a_wrong_profile_is_caught_without_the_server(
    live: tuple[Path, Path], tmp_path: Path
) -> None:
    root, _ = live
    tripled = _profile(tmp_path / "p3.yaml", 3.0)
    proc = loadgen("fidelity", SMOKE, "--sim-profile", tripled, "--measured",
                   _only(root / "real"), "--out", tmp_path / "f")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    table = orjson.loads((_only(tmp_path / "f") / "fidelity.json").read_bytes())
    decode = [r["error"] for r in table["rows"] if r["metric"] == "decode_median_tok_s"]
    # Tripled step costs predict a third of the decode rate the sim measured.
    assert len(decode) == 2 and all(e < -0.5 for e in decode), table["rows"]


def _refusal(tmp_path: Path, *args: str) -> str:
    profile = _profile(tmp_path / "p.yaml", 1.0)
    result = CliRunner().invoke(main, ["fidelity", str(SMOKE), "--sim-profile", str(profile),
                                       "--out", str(tmp_path / "f"), *args])  # fmt: skip
    assert result.exit_code == 2, result.output
    assert not (tmp_path / "f").exists()
    return result.output.strip().splitlines()[-1]


def _recorded(folder: Path, **manifest: object) -> Path:
    folder.mkdir(parents=True)
    (folder / "run.json").write_bytes(orjson.dumps({"seed": 3, **manifest}))
    return folder


def test_measured_refuses_what_it_cannot_score_in_one_line(
    live: tuple[Path, Path], tmp_path: Path
) -> None:
    root, _ = live
    recorded = _only(root / "real")
    line = _refusal(tmp_path, "--measured", str(recorded), "--seed", "4")
    assert line == (f"Error: --measured {recorded} replays the seed that run recorded: "
                    "drop --seed / --replay")  # fmt: skip
    line = _refusal(tmp_path, "--measured", str(root))
    assert line == (f"Error: --measured {root} is a fidelity directory: pass its measured "
                    f"run, {recorded}")  # fmt: skip
    other = _recorded(tmp_path / "other", scenario={"name": "ladder"}, interrupted=False)
    line = _refusal(tmp_path, "--measured", str(other))
    assert line == (f"Error: --measured {other}: that run is of scenario 'ladder', not 'smoke'; "
                    "pass a run of smoke or name its scenario")  # fmt: skip
    cut = _recorded(tmp_path / "cut", scenario={"name": "smoke"}, interrupted=True)
    line = _refusal(tmp_path, "--measured", str(cut))
    assert line == (f"Error: --measured {cut}: that run did not finish (run.json interrupted: "
                    "True); pass a finished run")  # fmt: skip
