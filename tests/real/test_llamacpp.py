"""loadgen against llama.cpp's llama-server (built from source, tiny model as GGUF) with two
slots: the launcher reads them back, four streams show as two processing and two deferred,
token counts come from the streams' usage and agree with the server's counter, and through
run_plan those gauges (requests_processing / requests_deferred, read as running / waiting) and
the slot count the launch reported make the two streams that waited `admission_cap`."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadgen.analysis.baselines import inferred_cap
from loadgen.analysis.rates import decode_tok_s
from loadgen.analysis.summary import analyze_run
from loadgen.analysis.timeline import Timeline
from loadgen.records import read_metrics, read_streams
from loadgen.request import StreamRequest
from loadgen.server.launcher import Server

from support.paths import DATA
from support.real import (
    assert_two_waited_on_the_cap,
    client,
    counter_reaching,
    note,
    polling,
    run_on,
    run_uniform,
    running,
    running_waiting,
    scrape,
    verdict_line,
)

WHALE = DATA / "scenarios" / "real_whale.yaml"

pytestmark = pytest.mark.real


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running("llama.cpp", ["-np", "2"], tmp_path_factory.mktemp("llama.cpp")) as server:
        yield server


def test_slots_are_read_back(llama: Server) -> None:
    facts = llama.facts
    assert (facts.max_num_seqs, facts.max_model_len) == (2, 8192)
    assert facts.sources["max_num_seqs"] == "boot_log"
    assert (facts.kv_cache_tokens, facts.max_num_batched_tokens) == (32768, 2048)
    assert facts.sources["kv_cache_tokens"] == "flags"
    assert facts.block_size is None


async def test_four_streams_two_processing_two_deferred(llama: Server) -> None:
    max_tokens = [2000, 2200, 2400, 2600]
    async with client(llama) as c:
        before = (await scrape(c)).get("generation_tokens_total", 0.0)
        async with polling(c) as samples:
            reqs = [
                StreamRequest(
                    id=f"slots-{i}",
                    model=llama.model,
                    prompt=f"import module_{i}",
                    max_tokens=n,
                    ignore_eos=True,
                )
                for i, n in enumerate(max_tokens)
            ]
            recs = await asyncio.gather(*(c.stream(r) for r in reqs))
        after = await counter_reaching(c, "generation_tokens_total", before + sum(max_tokens))
    for rec, n in zip(recs, max_tokens, strict=True):
        assert rec.status == "ok", f"{rec.id}: {rec.error}"
        assert rec.token_source == "usage_final"
        assert rec.completion_tokens == n
    assert after - before == sum(max_tokens)
    seen = running_waiting(samples)
    assert (2, 2) in seen, f"polls saw (processing, deferred) {sorted(seen)}"
    assert max(processing for processing, _ in seen) == 2
    rates = sorted(r for r in map(decode_tok_s, recs) if r is not None)
    per_stream = ", ".join(f"{r:.0f}" for r in rates)
    note("llama.cpp decode, 4 streams on 2 slots", f"per stream {per_stream} tok/s")


async def test_streams_over_the_slots_get_admission_cap(llama: Server, tmp_path: Path) -> None:
    # Sent together: llama-server's HTTP threads take them in any order, and the analysis
    # seats streams sent within its tie window in the order they were served.
    summary = await run_uniform(llama, tmp_path)
    note("llama.cpp -np 2, run_plan verdicts", verdict_line(summary))
    assert_two_waited_on_the_cap(summary, "boot_log")
    # The gauges alone tell the cap too: two processing while others were deferred.
    run_dir = next(tmp_path.iterdir())
    assert inferred_cap(Timeline(read_metrics(run_dir))) == 2


async def test_whale_and_minnows_run_through_run_plan(llama: Server, tmp_path: Path) -> None:
    # Minnows sent together, taken in any order: the first served gets the free slot at once
    # and waits for the whale's prefill batches (2048 tokens each, ~0.5 s); its decode then
    # gets one token per whale batch, so it holds its slot until the whale's prefill ends, and
    # the other two stay deferred all that time. (The whale's own verdict is left out: its 32
    # tokens overlap the late minnows' prefills, and whether that counts as rationed depends
    # on a few milliseconds.)
    run_dir = await run_on(llama, WHALE, tmp_path)
    records = read_streams(run_dir)
    assert sorted((r.group, r.prompt_tokens, r.completion_tokens) for r in records) == [
        *[("minnows", 200, 32)] * 3,
        ("whale", 6000, 32),
    ]
    summary = analyze_run(run_dir).summary
    note("llama.cpp -np 2, whale + minnows verdicts", verdict_line(summary))
    assert summary["run"]["cap"] == {"value": 2, "source": "boot_log"}
    minnows = sorted(
        (s["ttft_s"], s["verdict"]) for s in summary["streams"] if s["group"] == "minnows"
    )
    assert [v for _, v in minnows] == ["prefill_hol", "admission_cap", "admission_cap"]
