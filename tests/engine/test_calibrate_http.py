"""Ground truth for the calibration: `loadgen calibrate` against the built-in sim over HTTP (on
the wall clock, `loadgen sim` with the `default` card, launched by loadgen), then whale_c4,
ladder and politeness run both ways by `loadgen fidelity --server sim`: on that same wall-clock
sim and on the virtual clock with the fitted profile. The fit must recover a known model: every TTFT
median, decode-only rate median and wall within 5%, and the same verdicts.

Wall-clock, so it runs beside nothing else: one core for the sim, one for the client (about
2.5 minutes on two cores; `make test-truth`)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from loadgen.sim.profile_file import load_profile_file
from loadgen.sim.profiles import sim_profile

from support.cli import loadgen
from support.paths import REPO

ROOT = REPO
SCENARIOS = ("whale_c4", "ladder", "politeness")
# The seats and pool every one of the three scenarios fits (ladder reaches 8 streams).
SIM_SETS = ("sim.max_num_seqs=8", "sim.num_gpu_blocks=8527", "sim.max_model_len=131072")
JUDGED = ("ttft_median_s", "decode_median_tok_s", "reps_wall_s")
WITHIN = 0.05

pytestmark = pytest.mark.truth


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("calibrate-http")
    profile = out / "default-fit.yaml"
    sets = [a for s in SIM_SETS for a in ("--set", s)]
    proc = loadgen("calibrate", "--server", "sim", *sets, "--out", out, "--profile-out",
                   profile, timeout_s=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return profile


def test_the_fit_over_http_recovers_the_cards_costs(fitted: Path) -> None:
    step = load_profile_file(fitted).step
    known = sim_profile("default")
    # The HTTP path's cost per step lands in fixed_s; the slopes are the card's.
    for name in ("per_token_s", "decode_ctx_s", "prefill_ctx_s"):
        assert getattr(step, name) == pytest.approx(getattr(known, name), rel=0.05), name
    assert step.decode_token_s == pytest.approx(known.per_token_s, rel=0.25)
    # Over HTTP the client sees every first token after the sim's own histogram does.
    witness = load_profile_file(fitted).fit["server_witness"]
    assert witness and all(w["client_ttft_mean_s"] > w["server_ttft_mean_s"] for w in witness)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_fitted_virtual_clock_reproduces_the_wall_clock_sim(
    fitted: Path, scenario: str, tmp_path: Path
) -> None:
    proc = loadgen("fidelity", ROOT / "scenarios" / f"{scenario}.yaml", "--sim-profile", fitted,
                   "--server", "sim", "--out", tmp_path, "--seed", "7", "--tolerance", "5",
                   timeout_s=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    [root] = list(tmp_path.iterdir())
    table = orjson.loads((root / "fidelity.json").read_bytes())
    judged = [r for r in table["rows"] if r["metric"] in JUDGED]
    assert len(judged) >= 3
    misses = [(r["arm"], r["group"], r["metric"], r["error"]) for r in judged
              if r["error"] is None or abs(r["error"]) > WITHIN]  # fmt: skip
    assert misses == [], proc.stdout
    assert table["verdicts_agree"] == len(table["verdicts"]), table["verdicts"]
    assert f"of {table['figures']} figures within ±5%" in proc.stdout
