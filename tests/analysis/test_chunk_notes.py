"""Item 16 of issue #10: multi-token chunks are reported as seen, and speculative decoding is
named only when the server says it runs it."""

from __future__ import annotations

from loadgen.analysis.inputs import RunInputs
from loadgen.analysis.summary import analyze
from loadgen.report.text import decode_table

from support.run_fixtures import manifest, sample, stream, ticks


def _streams():
    # Two 8-chunk streams; vLLM put the last two tokens of the second in one chunk.
    return [
        stream("a", sent=0.0, chunks=ticks(0.1, 8, 0.01), tokens=[1] * 8),
        stream("b", sent=1.0, chunks=ticks(1.1, 8, 0.01), tokens=[1] * 7 + [2]),
    ]


def test_multi_token_chunks_are_counted_not_blamed_on_speculation():
    summary = analyze(RunInputs(manifest(), _streams(), [])).summary
    assert summary["groups"]["g"]["chunk_tokens"] == {"chunks": 16, "multi": 1, "tokens": 17}
    notes = decode_table(summary).notes
    assert "g: 1 of 16 chunks carried >1 token; tokens/chunk = 1.06" in notes
    assert not any("specul" in n for n in notes)


def test_speculation_is_named_when_the_server_counts_drafts():
    metrics = [
        sample(0.0, drafts=0, draft_tokens=0, accepted=0),
        sample(3.0, drafts=10, draft_tokens=30, accepted=15),
    ]
    summary = analyze(RunInputs(manifest(), _streams(), metrics)).summary
    notes = decode_table(summary).notes
    assert "g: 1 of 16 chunks carried >1 token; tokens/chunk = 1.06" in notes
    assert (
        "the server reports speculative decoding (acceptance 0.500): a chunk can carry one "
        "engine step of several tokens, so chunks/s is a step rate"
    ) in notes
