"""Each profile reproduces the seed figures it was fitted to, on the engine in virtual time."""

import pytest

from loadgen.sim.engine import Engine, EngineConfig, SimRequest
from loadgen.sim.profiles import (
    FITTED,
    RTX3090_LONG,
    RTX4090_LONG,
    SIM_PROFILES,
    SeedFigures,
    StepProfile,
    sim_profile,
)
from loadgen.sim.tokenizer import SimTokenizer

TOK = SimTokenizer()
MINNOW = 4096


def prompt(n: int, seed: int) -> list[int]:
    return TOK.generator(seed).take(n)


def solo(profile: StepProfile, n_prompt: int, max_tokens: int) -> dict:
    e = Engine(EngineConfig(profile=profile))
    e.add_request(SimRequest("r", prompt(n_prompt, 1), max_tokens=max_tokens))
    e.run_until_idle()
    return e.ground_truth()[0]


def decode_steps_per_s(row: dict) -> float:
    ends = [end for _, end, _ in row["tokens_per_step"]]
    return (len(ends) - 1) / (ends[-1] - ends[0])


def warm_whale_ttft(profile: StepProfile, f: SeedFigures) -> float:
    """A primed whale, then the measured launch: whale first, plus 3 minnows in the C4 mix."""
    e = Engine(EngineConfig(profile=profile, max_num_seqs=4))
    whale = prompt(f.cold_prompt_tokens, 0)
    e.add_request(SimRequest("prime", whale, max_tokens=1))
    e.run_until_idle()
    t0 = e.now_s
    e.add_request(SimRequest("whale", whale, max_tokens=256, arrival_s=t0))
    if f.warm_with_minnow_chunk:
        for i in range(3):
            e.add_request(SimRequest(f"m{i}", prompt(MINNOW, 10 + i), 256, arrival_s=t0))
    e.run_until_idle()
    row = next(r for r in e.ground_truth() if r["request_id"] == "whale")
    return row["first_token_s"] - t0


CASES = [(FITTED["rtx4090-long"], RTX4090_LONG), (FITTED["rtx3090-long"], RTX3090_LONG)]
IDS = ["4090", "3090"]


@pytest.mark.parametrize(("profile", "f"), CASES, ids=IDS)
def test_shallow_decode_rate(profile: StepProfile, f: SeedFigures) -> None:
    rate = decode_steps_per_s(solo(profile, 256, 256))
    assert rate == pytest.approx(f.shallow_decode_steps_s, rel=0.15)


@pytest.mark.parametrize(("profile", "f"), CASES, ids=IDS)
def test_deep_decode_rate(profile: StepProfile, f: SeedFigures) -> None:
    rate = decode_steps_per_s(solo(profile, f.deep_prompt_tokens, 256))
    assert rate == pytest.approx(f.deep_decode_steps_s, rel=0.15)


@pytest.mark.parametrize(("profile", "f"), CASES, ids=IDS)
def test_cold_deep_prefill(profile: StepProfile, f: SeedFigures) -> None:
    row = solo(profile, f.cold_prompt_tokens, 1)
    assert row["first_token_s"] == pytest.approx(f.cold_ttft_s, rel=0.15)


def test_4090_prefill_averages_1100_tokens_per_second() -> None:
    row = solo(FITTED["rtx4090-long"], 72_631, 1)
    assert 72_631 / row["first_token_s"] == pytest.approx(1100, rel=0.15)


@pytest.mark.parametrize(("profile", "f"), CASES, ids=IDS)
def test_sized_probe_cold_prefill(profile: StepProfile, f: SeedFigures) -> None:
    row = solo(profile, f.probe_prompt_tokens, 1)
    assert row["first_token_s"] == pytest.approx(f.probe_ttft_s, rel=0.15)


@pytest.mark.parametrize(("profile", "f"), CASES, ids=IDS)
def test_warm_whale_ttft(profile: StepProfile, f: SeedFigures) -> None:
    assert warm_whale_ttft(profile, f) == pytest.approx(f.warm_ttft_s, rel=0.15)


def test_default_is_the_4090_shape_ten_times_faster() -> None:
    default, rtx4090 = sim_profile("default"), FITTED["rtx4090-long"]
    assert default.fixed_s == pytest.approx(rtx4090.fixed_s / 10)
    assert default.cached_token_s == pytest.approx(rtx4090.cached_token_s / 10)
    e = Engine(EngineConfig(profile=default, max_num_seqs=4, max_num_batched_tokens=2048))
    e.add_request(SimRequest("whale", prompt(72_631, 0), max_tokens=256))
    for i in range(3):
        e.add_request(SimRequest(f"m{i}", prompt(MINNOW, 10 + i), max_tokens=256))
    e.run_until_idle()
    rows = {r["request_id"]: r for r in e.ground_truth()}
    assert e.now_s < 12.0  # whale_c4 end to end, against ~84 s at the 4090 profile
    assert all(rows[f"m{i}"]["first_token_s"] > rows["whale"]["first_token_s"] for i in range(3))


def test_tiny_finishes_a_small_scenario_fast() -> None:
    e = Engine(EngineConfig(profile=sim_profile("tiny")))
    for i in range(8):
        e.add_request(SimRequest(f"r{i}", prompt(1000, i), max_tokens=64))
    e.run_until_idle()
    assert e.now_s < 1.0


def test_fitted_constants_are_positive() -> None:
    for p in SIM_PROFILES.values():
        assert min(p.fixed_s, p.per_token_s, p.decode_ctx_s, p.prefill_ctx_s, p.cached_token_s) > 0


def test_unknown_profile_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="default, rtx3090-long, rtx4090-long, tiny"):
        sim_profile("h100")
