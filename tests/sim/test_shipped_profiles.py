"""The fitted profiles shipped in profiles/: each loads, names what it was fitted on, is listed
in profiles/README.md with its fidelity table, and drives a virtual run whose prediction is the
table's predicted column (a sim change that moves a prediction must redraw the table)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson
import pytest

from loadgen.analysis.calibration import read_witnesses
from loadgen.sim.profile_file import load_profile_file, unpredictable, write_profile_file

from support.cli import loadgen
from support.paths import REPO

PROFILES = REPO / "profiles"
SHIPPED = sorted(PROFILES.glob("*.yaml"))


def test_profiles_are_shipped_for_the_servers_this_project_reaches() -> None:
    assert {p.stem for p in SHIPPED} >= {"vllm-cpu-tiny", "llamacpp-cpu-tiny", "h200-vllm-llama8b"}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_a_shipped_profile_names_its_server_and_its_error(path: Path) -> None:
    p = load_profile_file(path)
    for key in ("server", "model", "hardware", "date"):
        assert p.fitted_on.get(key), (path.name, key)
    assert p.fit["measurements"] == len(p.measurements) > 0
    assert 0 <= p.fit["rms_error"] <= p.fit["max_error"]
    readme = (PROFILES / "README.md").read_text()
    assert f"`{path.name}`" in readme
    assert f"rms {p.fit['rms_error']:.1%}" in readme


def test_a_profile_from_before_points_had_their_name_reads_as_one_written_now(
    tmp_path: Path,
) -> None:
    # Shipped as calibrate wrote it then: its measurement and witness rows key the point `probe`.
    path = PROFILES / "h200-vllm-llama8b.yaml"
    assert "\n- probe: tiny\n" in path.read_text() and "point:" not in path.read_text()
    old = load_profile_file(path)
    assert [m.point for m in old.measurements][:2] == ["tiny", "prefill-1024"]
    witnesses = read_witnesses(old.fit)
    assert (witnesses[0].point, witnesses[-1].point) == ("tiny", "decode-ctx98240")
    # The same rows written now key it `point`, and read back equal.
    write_profile_file(tmp_path / "now.yaml", old)
    text = (tmp_path / "now.yaml").read_text()
    assert "\n- point: tiny\n" in text and "\n- probe:" not in text
    assert load_profile_file(tmp_path / "now.yaml").measurements == old.measurements
    # What the rows' names decide reads them under either key: without a boots record, two
    # decode-b* points price a change of seats (h200 has four), a missing pair does not.
    bare = dataclasses.replace(old, fitted_boots=())
    assert unpredictable(bare, "max_num_seqs") is None
    none = dataclasses.replace(bare, measurements=old.measurements[:1])
    assert "no decode-b* points" in str(unpredictable(none, "max_num_seqs"))


@pytest.mark.parametrize(
    ("profile", "whale", "minnows"),
    [
        # profiles/README.md's h200 table: whale_c4 at seed 11, TTFT medians predicted.
        ("h200-vllm-llama8b.yaml", 4.465, 4.166),
        # fidelity/h200-vllm-llama8b-graph.whale_c4.txt, the same scenario and seed.
        ("h200-vllm-llama8b-graph.yaml", 4.228, 3.946),
    ],
)
def test_the_h200_tables_prediction_is_what_the_profile_predicts(
    tmp_path: Path, profile: str, whale: float, minnows: float
) -> None:
    proc = loadgen("run", "whale_c4", "--clock", "virtual", "--sim-profile", PROFILES / profile,
                   "--seed", "11", "--out", tmp_path, "--no-progress")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    [run] = list(tmp_path.iterdir())
    groups = orjson.loads((run / "summary.json").read_bytes())["groups"]
    assert round(groups["whale"]["ttft_s"]["median"], 3) == whale
    assert round(groups["minnows"]["ttft_s"]["median"], 3) == minnows
