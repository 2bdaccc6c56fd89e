"""A stream's many window rates (rule 6 asks one per stretch of others' prefills) equal, to the
last bit, the window_rate sums they replaced, on seeded random streams: chunk times with ties,
token counts from usage or spread, unordered chunks, pieces empty or holding no chunk."""

from __future__ import annotations

import dataclasses
import random

import pytest

from loadgen.analysis import rates
from loadgen.analysis.streams import StreamWindows, WindowRate, window_rate
from loadgen.records import StreamRecord

from support.run_fixtures import stream


def window_rate_by_scan(rec: StreamRecord, from_ns: int, to_ns: int) -> WindowRate | None:
    """The scan it replaced: every chunk, its tokens added in arrival order."""
    if to_ns <= from_ns:
        return None
    tokens, chunks = 0.0, 0
    for t, k in zip(rec.chunk_ns, rates.chunk_token_counts(rec), strict=True):
        if from_ns < t <= to_ns:
            tokens += k
            chunks += 1
    return WindowRate(from_ns, to_ns, tokens, chunks, rec.token_source)


def pieces_rate_by_scan(rec: StreamRecord, pieces: list[tuple[int, int]]) -> WindowRate | None:
    """The union's rate as verdicts computed it: every piece's window_rate, summed in order."""
    pieces = [(a, b) for a, b in pieces if b > a]
    if not pieces:
        return None
    parts = [window_rate_by_scan(rec, a, b) for a, b in pieces]
    length = sum(b - a for a, b in pieces)
    return WindowRate(
        from_ns=pieces[0][0],
        to_ns=pieces[-1][1],
        tokens=sum(p.tokens for p in parts if p is not None),
        chunks=sum(p.chunks for p in parts if p is not None),
        token_source=rec.token_source,
        excluded_ns=pieces[-1][1] - pieces[0][0] - length,
    )


def random_stream(rng: random.Random) -> StreamRecord:
    n = rng.randint(1, 40)
    chunks = sorted(round(rng.uniform(0.1, 2.0), rng.choice([2, 6])) for _ in range(n))
    if rng.random() < 0.3:  # usage per chunk
        rec = stream("s", chunks=chunks, tokens=[rng.randint(1, 4) for _ in range(n)])
    else:  # tokens spread over the chunks: thirds, sevenths, whose sums round
        rec = stream("s", chunks=chunks, completion=rng.randint(n, 7 * n), token_source="usage")
    if rng.random() < 0.15:
        rec = dataclasses.replace(rec, chunk_ns=rng.sample(rec.chunk_ns, n))
    return rec


@pytest.mark.parametrize("seed", range(60))
def test_every_window_rate_is_the_scans_to_the_last_bit(seed: int) -> None:
    rng = random.Random(seed)
    rec = random_stream(rng)
    windows = StreamWindows(rec)
    edges = sorted(rng.randint(0, 2_100_000_000) for _ in range(2 * rng.randint(0, 30)))
    pieces = [(edges[k], edges[k + 1]) for k in range(0, len(edges), 2)]
    pieces = [(a, a if rng.random() < 0.2 else b) for a, b in pieces]  # some hold no time
    assert windows.rates_from_each(pieces) == [
        pieces_rate_by_scan(rec, pieces[i:]) for i in range(len(pieces))
    ]
    for a, b in pieces:
        assert windows.rate(a, b) == window_rate(rec, a, b) == window_rate_by_scan(rec, a, b)
        assert windows.rate(b, a) == window_rate(rec, b, a) is None
