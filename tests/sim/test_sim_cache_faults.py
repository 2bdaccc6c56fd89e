"""The sim's knobs the cache probe is tested with: a fixed per-request overhead (the TTFT floor),
greedy answers that depend on the prompt alone, and the warm_mismatch fault."""

from __future__ import annotations

import pytest

from loadgen.sim.engine import Engine, EngineConfig, SimRequest
from loadgen.sim.faults import parse_fault_options
from loadgen.sim.server import SimServerConfig
from loadgen.sim.tokenizer import SimTokenizer

PROMPT = SimTokenizer().generator(42).take(320)  # 20 blocks of 16


def answers(salts: tuple[str | None, ...], **cfg) -> tuple[Engine, list[tuple[int, ...]]]:
    """The same prompt sent once per salt, one after the other; each answer's token ids."""
    e = Engine(EngineConfig(**cfg))
    out = []
    for i, salt in enumerate(salts):
        e.add_request(SimRequest(f"r{i}", PROMPT, max_tokens=8, cache_salt=salt, arrival_s=e.now_s))
        ids = [t for step in e.run_until_idle() for o in step.outputs for t in o.token_ids]
        out.append(tuple(ids))
    return e, out


def test_the_same_prompt_answers_the_same_cold_and_warm() -> None:
    e, (cold, warm) = answers((None, None))
    assert e.prefix_cache_hits_total == 304  # the second send hit 19 of 20 blocks
    assert cold == warm and len(cold) == 8


def test_warm_mismatch_changes_only_a_cache_hit_answer() -> None:
    e, (cold, warm, other_salt) = answers((None, None, "s"), warm_mismatch=1.0)
    assert e.prefix_cache_hits_total == 304  # only the second send hit
    assert warm != cold
    assert other_salt == cold  # a cold send (its own salt) answers as the first did


def test_warm_mismatch_is_a_probability_fault() -> None:
    cfg = SimServerConfig(faults=parse_fault_options(["warm_mismatch=0.25"]))
    assert cfg.effective_engine_config().warm_mismatch == 0.25
    with pytest.raises(ValueError, match=r"probability must lie in 0\.\.1"):
        parse_fault_options(["warm_mismatch=2"])


def test_request_overhead_delays_the_first_token_by_exactly_the_overhead() -> None:
    def ttft(overhead: float) -> float:
        e = Engine(EngineConfig(request_overhead_s=overhead))
        e.add_request(SimRequest("r", PROMPT[:16], max_tokens=1, arrival_s=0.0))
        e.run_until_idle()
        row = e.ground_truth()[0]
        assert row["arrival_s"] == 0.0  # truth keeps the arrival: the overhead is in TTFT
        return row["first_token_s"] - row["arrival_s"]

    assert ttft(0.05) - ttft(0.0) == pytest.approx(0.05, abs=1e-12)
