"""The small whale + minnows on vLLM and on the sim configured like it, through
tools/compare_sim_vllm.py: vLLM's minnows, sent while the whale's 6000-token prompt is being
prefilled 512 tokens a step, wait behind that prefill (`prefill_hol`), and the sim, given
vLLM's limits, gives its minnows the same verdicts."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

# tools/ is on sys.path: conftest.py imports realutil, which puts it there.
from compare_sim_vllm import SideBySide, compare_sim_vllm, group_verdicts
from realutil import note

pytestmark = pytest.mark.real

WHALE_ID = "default/r0/whale/0"


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SideBySide]:
    out = tmp_path_factory.mktemp("compare-sim-vllm")
    yield asyncio.run(compare_sim_vllm(out))


def minnows(summary: dict) -> list[dict]:
    return [s for s in summary["streams"] if s["group"] == "minnows" and s["phase"] == "measure"]


def test_vllm_minnows_wait_behind_the_whale_prefill(compared: SideBySide) -> None:
    run = compared.vllm["run"]
    assert run["cap"] == {"value": 4, "source": "boot_log"}
    assert [s["completion_tokens"] for s in compared.vllm["streams"]] == [32] * 4
    for s in minnows(compared.vllm):
        assert s["verdict"] == "prefill_hol", s["evidence"]
        assert WHALE_ID in s["evidence"]["prefilling"]
    whale = compared.vllm["groups"]["whale"]["ttft_s"]["median"]
    ttfts = ", ".join(f"{s['ttft_s']:.3f}" for s in minnows(compared.vllm))
    note("vllm whale + minnows (budget 512)", f"whale TTFT {whale:.3f} s, minnows {ttfts} s")


def test_sim_like_vllm_gives_the_minnows_the_same_verdicts(compared: SideBySide) -> None:
    assert group_verdicts(compared.sim, "minnows") == group_verdicts(compared.vllm, "minnows")
    assert compared.sim["run"]["cap"] == compared.vllm["run"]["cap"]
    note("sim like vllm", " ".join(compared.sim_flags))
    for group in ("whale", "minnows"):
        a, b = compared.vllm["groups"][group], compared.sim["groups"][group]
        note(
            f"vllm vs sim, {group}",
            f"TTFT median {a['ttft_s']['median']:.3f} vs {b['ttft_s']['median']:.3f} s, "
            f"decode median {a['decode_tok_s']['median']:.0f} vs "
            f"{b['decode_tok_s']['median']:.0f} tok/s, verdicts "
            f"{group_verdicts(compared.vllm, group)} vs {group_verdicts(compared.sim, group)}",
        )
    assert "Verdict per stream" in compared.text and "Compare (B - A" in compared.text
