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

from loadgen.analysis.calibration import ServerShape, prefill_steps
from loadgen.sim.profile_file import load_profile_file
from loadgen.sim.profiles import StepProfile, sim_profile

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


def _cold_prefill_s(profile: StepProfile, shape: ServerShape, prompt_tokens: int) -> float:
    """The engine time the step model gives one stream's cold prefill, alone on the server:
    each of calibrate's prefill steps priced by the profile's own step_s."""
    return sum(
        profile.step_s(
            scheduled_tokens=int(step["per_token_s"]),
            decode_context_tokens=0,
            prefill_attention_work=step["prefill_ctx_s"],
            restored_tokens=int(step["cached_token_s"]),
        )
        for step in prefill_steps(shape, prompt_tokens, 0)
    )


def test_the_fit_over_http_recovers_the_cards_costs(fitted: Path) -> None:
    profile = load_profile_file(fitted)
    step, known = profile.step, sim_profile("default")
    # The HTTP path's cost per step lands in fixed_s; the slopes are the card's.
    for name in ("per_token_s", "decode_ctx_s"):
        assert getattr(step, name) == pytest.approx(getattr(known, name), rel=0.05), name
    # prefill_ctx_s and per_token_s share the prefill points, so a fit trades one against the
    # other: on an idle build machine prefill_ctx_s came out 0.8-2.7% low with per_token_s
    # 0.4-1.1% high; in a CI run on a noisy host (the fit's rms error 2.0% against 0.9% idle)
    # 5.6% low with per_token_s 2.2% high. What the pair must recover is what it predicts, the
    # prefill time, within the module's 5% at every cold prompt calibrate measured (1k-64k
    # tokens: idle 1.04% off at most, beside a busy core 0.64%, that CI run 2.04%).
    facts = profile.facts
    shape = ServerShape(facts["max_num_batched_tokens"], facts["max_num_seqs"],
                        facts["block_size"], facts["max_model_len"])  # fmt: skip
    prompts = [int(m.basis["prompt_tokens"]) for m in profile.measurements
               if m.point.startswith("prefill-")]  # fmt: skip
    assert len(prompts) >= 4, [m.point for m in profile.measurements]
    for prompt in prompts:
        fit_s, card_s = _cold_prefill_s(step, shape, prompt), _cold_prefill_s(known, shape, prompt)
        assert fit_s == pytest.approx(card_s, rel=WITHIN), prompt
    assert step.decode_token_s == pytest.approx(known.per_token_s, rel=0.25)
    # Over HTTP the client sees every first token after the sim's own histogram does.
    witness = profile.fit["server_witness"]
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
