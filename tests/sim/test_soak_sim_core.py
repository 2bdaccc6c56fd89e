"""The sim's drift fault and the drift verdict together, on the engine core's own clock."""

from __future__ import annotations

import math

import numpy as np
import pytest

from loadgen.analysis.soak import analyze_soak
from loadgen.analysis.timeline import Timeline
from loadgen.sim.engine import Engine, EngineConfig, SimRequest
from loadgen.sim.profiles import sim_profile

from support.sim_soak import TOK, engine_soak

TEN_MINUTES = 600.0


def decode_s_per_token(drift: float, prompt: int, at_s: float) -> float:
    engine = Engine(EngineConfig(profile=sim_profile("rtx4090-long"), num_gpu_blocks=16_384,
                                 drift_per_hour=drift))  # fmt: skip
    engine.add_request(SimRequest("a", TOK.generator(1).take(prompt), max_tokens=65,
                                  arrival_s=at_s))  # fmt: skip
    steps = engine.run_until_idle()
    first = next(i for i, s in enumerate(steps) if s.outputs)
    return (steps[-1].start_s + steps[-1].duration_s - steps[first].start_s
            - steps[first].duration_s) / 64  # fmt: skip


@pytest.mark.parametrize("prompt", [1_000, 50_000])
def test_drift_slows_decode_by_its_rate_whatever_the_context(prompt: int) -> None:
    at_start = decode_s_per_token(0.3, prompt, 0.0)
    an_hour_in = decode_s_per_token(0.3, prompt, 3600.0)
    # Step time x (1 + 0.3 h): 1.3 at one hour, a little more for the seconds the request lasts.
    assert an_hour_in / at_start == pytest.approx(1.3, rel=2e-3)
    # Without the fault the hour changes nothing.
    no_drift = decode_s_per_token(0.0, prompt, 0.0)
    assert decode_s_per_token(0.0, prompt, 3600.0) == pytest.approx(no_drift, rel=1e-9)


def mixed_sizes(seed: int):
    rng = np.random.default_rng(seed)
    return lambda i, t: (int(rng.integers(500, 4000)), 128)


def verdict_of(records) -> dict:
    return analyze_soak(records, Timeline([]), [])["verdict"]


def test_a_30_percent_an_hour_leak_is_drift_within_ten_minutes() -> None:
    v = verdict_of(engine_soak(TEN_MINUTES, mixed_sizes(1), drift_pct_per_h=30, spec_tokens=1))
    assert v["verdict"] == "drift"
    # 10 min at 30 %/h: step time x ~1.05, rate x ~0.953 at the end against the start.
    assert v["adjusted"]["effect"] == pytest.approx(1 / 1.05 - 1, abs=0.01)


def test_no_drift_is_called_no_drift_on_19_of_20_seeds() -> None:
    verdicts = [
        verdict_of(engine_soak(TEN_MINUTES, mixed_sizes(s), seed=s, spec_tokens=1))["verdict"]
        for s in range(20)
    ]
    assert verdicts.count("no drift") >= 19, verdicts
    assert "drift" not in verdicts


def test_contexts_growing_without_drift_are_not_called_drift() -> None:
    rng = np.random.default_rng(7)

    def growing(i: int, t: float) -> tuple[int, int]:
        # Mean prompt 2k -> 24k over an hour, each request scattered around it.
        return int((2_000 + 22_000 * t / 3600) * math.exp(rng.normal(0, 0.4))), 512

    out = analyze_soak(engine_soak(3600, growing, spec_tokens=1), Timeline([]), [])
    v = out["verdict"]
    assert out["windows"][-1]["context_mean"] > 3 * out["windows"][0]["context_mean"]
    assert v["raw"]["ci_hi"] < -0.025  # the raw rate fell with the deeper contexts
    assert (v["verdict"], v["case"]) == ("mix changed", "traffic")
    first, last = out["windows"][0]["context_mean"], out["windows"][-1]["context_mean"]
    assert v["context_change"] == pytest.approx(last / first - 1)
