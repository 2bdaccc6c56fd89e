"""loadgen against llama.cpp's llama-server (built from source, tiny model as GGUF) with two
slots: the launcher reads them back, four streams show as two processing and two deferred, and
token counts come from the streams' usage and agree with the server's counter."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from realutil import client, counter_reaching, note, polling, running, running_waiting, scrape

from loadgen.analysis.rates import decode_tok_s
from loadgen.request import StreamRequest
from loadgen.server.launcher import Server

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
