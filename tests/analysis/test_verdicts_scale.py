"""Verdicts at scale: the indexes that replaced per-stream scans give exactly what the scans
gave (checked against the straightforward scans on seeded random runs), and judging a run
does work proportional to its streams, counted, not timed."""

from __future__ import annotations

import random
from typing import Any

import pytest

from loadgen.analysis import verdicts
from loadgen.analysis.baselines import WAITING
from loadgen.analysis.inputs import RunInputs
from loadgen.analysis.maxtree import ABSENT, Counts, MaxTree, Spans
from loadgen.analysis.occupancy import TIE_WINDOW_NS, Prefills, Seat, seats
from loadgen.analysis.pool import PoolEvidence
from loadgen.analysis.summary import analyze
from loadgen.analysis.timeline import Timeline
from loadgen.records import MetricsSample, StreamRecord

from support.run_fixtures import manifest, sample, stream, ticks

SEEDS = range(40)


def random_run(rng: random.Random) -> tuple[list[StreamRecord], list[MetricsSample]]:
    """A few dozen streams sent close together (ties, queues, overlapping prefills, some
    without a first token) and polls whose kv hovers at the pool's edge, with preemptions."""
    streams = []
    for i in range(rng.randint(2, 40)):
        sent = round(rng.uniform(0, 6) if rng.random() < 0.8 else rng.choice([0.0, 1.0]), 3)
        first = sent + rng.expovariate(1 / 2) + 0.01
        if rng.random() < 0.3:  # on a poll: the evidence's edges are half-open
            sent, first = round(sent * 2) / 2, round(first * 2) / 2 + 0.5
        n = rng.randint(0, 12)
        gaps = [rng.choice([0.02, 0.05, 0.4, 1.5]) for _ in range(n)]
        chunks = [first + sum(gaps[:k]) for k in range(n)]
        prompt = rng.choice([200, 1000, 4000, 30000])
        streams.append(stream(f"s{i:02d}", sent=sent, chunks=chunks, prompt=prompt))
    preemptions, polls = 0.0, []
    for k in range(rng.randint(0, 30)):
        preemptions += rng.random() < 0.15
        polls.append(
            sample(
                k * 0.5,
                running=rng.randint(0, 8),
                waiting=rng.randint(0, 6),
                kv=rng.choice([0.1, 0.9, 0.95, 0.97, 0.99]),
                preempt=preemptions,
            )
        )
    return streams, polls


def first_ahead_by_scan(
    modelled: dict[str, Seat], rank: int, t0: int, t1: int, limit: int
) -> list[str]:
    """The scan it replaced: every stream in id order, the first `limit` that match."""
    found = [
        s.id
        for s in sorted(modelled.values(), key=lambda s: s.id)
        if s.rank < rank and s.admit_ns < t1 and s.prefill_end_ns > max(t0, s.admit_ns)
    ]
    return found[:limit]


def overlapping_by_scan(modelled: dict[str, Seat], t0: int, t1: int) -> list[Seat]:
    return sorted(
        (s for s in modelled.values() if s.admit_ns < min(s.prefill_end_ns, t1)
         and s.prefill_end_ns > t0),
        key=lambda s: (s.admit_ns, s.id),
    )  # fmt: skip


def groups_by_scan(modelled: dict[str, Seat], t0: int, t1: int) -> list[tuple[int, int, list[str]]]:
    """The merge it replaced: just the prefills overlapping the window, merged where they
    touch, clipped to it, each piece with the ids merged into it."""
    merged: list[tuple[int, int, list[str]]] = []
    for s in overlapping_by_scan(modelled, t0, t1):
        if merged and s.admit_ns <= merged[-1][1]:
            a, b, ids = merged[-1]
            merged[-1] = (a, max(b, s.prefill_end_ns), [*ids, s.id])
        else:
            merged.append((s.admit_ns, s.prefill_end_ns, [s.id]))
    return [(max(a, t0), min(b, t1), ids) for a, b, ids in merged]


def stretches_by_scan(modelled: dict[str, Seat], t0: int, t1: int) -> list[tuple[int, int]]:
    return [(a, b) for a, b, _ in groups_by_scan(modelled, t0, t1)]


def first_during_by_scan(modelled: dict[str, Seat], t0: int, t1: int, limit: int) -> list[str]:
    return sorted(s.id for s in overlapping_by_scan(modelled, t0, t1))[:limit]


def queued_by_scan(pool: PoolEvidence, seat: Seat, j: int) -> bool:
    """The count it replaced: the streams after this one in admission order, one by one."""
    poll = pool.timeline.samples[j]
    t = poll.t_ns
    if not seat.sent_ns <= t < seat.prefill_end_ns:
        return False
    later = 0
    for s in pool.scanned[seat.rank + 1 :]:  # type: ignore[attr-defined]
        if s.sent_ns > t + TIE_WINDOW_NS:
            break
        later += int(s.sent_ns <= t < s.prefill_end_ns)
    return later < poll.values.get(WAITING, 0)


def every_poll(pool: PoolEvidence, t0: int, t1: int, tokens: int | None) -> list[int]:
    """The cuts it replaced: every poll of the wait."""
    return pool.timeline.times_between(t0, t1)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_indexes_answer_as_the_scans_did_in_any_order(seed: int) -> None:
    rng = random.Random(seed)
    records, _ = random_run(rng)
    modelled = seats(records, rng.choice([None, 1, 2, 4]))
    index = Prefills(modelled)
    times = sorted({t for s in modelled.values() for t in (s.sent_ns, s.admit_ns, s.end_ns)})
    for _ in range(60):
        t0, t1 = sorted(rng.choice(times) + rng.randint(-1, 1) for _ in range(2))
        rank, limit = rng.randint(-1, len(modelled) + 1), rng.randint(1, 5)
        # Ranks asked at random, so the index of the streams ahead moves back as well as on.
        got = index.first_ahead(rank, t0, t1, limit)
        assert got == first_ahead_by_scan(modelled, rank, t0, t1, limit)
        assert index.stretches(t0, t1) == stretches_by_scan(modelled, t0, t1)
        assert index.first_during(t0, t1, limit) == first_during_by_scan(modelled, t0, t1, limit)
        # Who prefilled in a piece is asked of the piece alone: the same streams as were
        # merged into it.
        for a, b, ids in groups_by_scan(modelled, t0, t1):
            assert index.first_during(a, b, len(modelled)) == sorted(ids)


@pytest.mark.parametrize("seed", SEEDS)
def test_every_verdict_and_its_evidence_match_the_scans(seed: int, monkeypatch) -> None:
    rng = random.Random(seed)
    records, polls = random_run(rng)
    server = {
        "max_num_seqs": rng.choice([None, 2, 4]),
        "source": "flags",
        "block_size": 16,
        "num_gpu_blocks": rng.choice([None, 2000, 40000]),
    }

    def summary() -> dict[str, Any]:
        return analyze(RunInputs(manifest(server=server), records, polls)).summary

    fast = summary()
    built = Prefills.__init__

    def keeping_seats(self: Any, modelled: dict[str, Seat]) -> None:
        built(self, modelled)
        self.scanned = modelled

    monkeypatch.setattr(Prefills, "__init__", keeping_seats)
    monkeypatch.setattr(Prefills, "first_ahead", lambda self, *a: first_ahead_by_scan(
        self.scanned, *a))  # fmt: skip
    monkeypatch.setattr(Prefills, "stretches", lambda self, *a: stretches_by_scan(
        self.scanned, *a))  # fmt: skip
    monkeypatch.setattr(Prefills, "first_during", lambda self, *a: first_during_by_scan(
        self.scanned, *a))  # fmt: skip
    monkeypatch.setattr(PoolEvidence, "cuts_between", every_poll)
    judged = PoolEvidence.__init__

    def keeping_order(self: Any, timeline: Timeline, modelled: dict[str, Seat], *a: Any) -> None:
        judged(self, timeline, modelled, *a)
        self.scanned = sorted(modelled.values(), key=lambda s: s.rank)

    monkeypatch.setattr(PoolEvidence, "__init__", keeping_order)
    monkeypatch.setattr(PoolEvidence, "_queued", queued_by_scan)
    assert summary() == fast


def test_a_max_tree_finds_exactly_the_values_that_pass_in_order() -> None:
    rng = random.Random(7)
    values = [rng.choice([ABSENT, *range(10)]) for _ in range(37)]
    tree = MaxTree(values)
    for _ in range(200):
        i = rng.randrange(len(values))
        values[i] = rng.choice([ABSENT, *range(10)])
        tree.set(i, values[i])
        lo, hi = sorted(rng.randrange(len(values) + 1) for _ in range(2))
        floor = rng.randint(-1, 10)
        want = [j for j in range(lo, hi) if values[j] > floor]
        assert list(tree.where(lo, hi, lambda v, f=floor: v > f)) == want


def test_a_count_tree_counts_as_a_sum_does() -> None:
    rng = random.Random(8)
    held = [rng.randint(0, 1) for _ in range(29)]
    counts = Counts(len(held), 1)
    for i in range(len(held)):
        counts.add(i, held[i] - 1)
    for _ in range(200):
        i = rng.randrange(len(held))
        step = rng.choice([-1, 1])
        held[i] += step
        counts.add(i, step)
        place = rng.randrange(len(held) + 1)
        assert counts.below(place) == sum(held[:place])


def queue(n: int) -> tuple[list[StreamRecord], list[MetricsSample]]:
    """n streams sent 0.1 s apart to 2 seats that free one every 0.5 s: the queue, and every
    wait, grows over the run; polled every 0.1 s."""
    streams = [
        stream(f"q{i:04d}", sent=i * 0.1, chunks=ticks(1.0 + i * 0.5, 3, 0.01)) for i in range(n)
    ]
    polls = [sample(k * 0.1, running=2, waiting=k // 2, kv=0.1) for k in range(n * 5 + 20)]
    return streams, polls


def judged_pieces(n: int, monkeypatch) -> tuple[int, dict[str, int]]:
    """How many pieces of waits verdicts judged for queue(n), and the verdicts."""
    calls = 0
    interval = PoolEvidence.interval

    def counted(self: PoolEvidence, t: float) -> int:
        nonlocal calls
        calls += 1
        return interval(self, t)

    monkeypatch.setattr(PoolEvidence, "interval", counted)
    records, polls = queue(n)
    server = {"max_num_seqs": 2, "source": "flags", "block_size": 16, "num_gpu_blocks": 1000}
    ctx = verdicts.build_context(records, Timeline(polls), manifest(server=server))
    calls = 0
    names: dict[str, int] = {}
    for v in verdicts.classify_streams(ctx).values():
        names[v.name] = names.get(v.name, 0) + 1
    return calls, names


def test_a_growing_queue_is_judged_in_pieces_per_stream_not_per_poll(monkeypatch) -> None:
    # Each wait spans up to 2,000 polls of unchanging evidence; it was judged poll by poll
    # (about n^2 / 2 pieces), now once per change of state.
    pieces, names = judged_pieces(800, monkeypatch)
    assert names["admission_cap"] > 700
    assert pieces < 10 * 800


def healthy(n: int) -> list[StreamRecord]:
    """n streams 0.1 s apart, each done before the next: every one is judged for rationing."""
    return [stream(f"h{i:04d}", sent=i * 0.1, chunks=ticks(i * 0.1 + 0.05, 5, 0.01))
            for i in range(n)]  # fmt: skip


@pytest.mark.parametrize("shape", ["queue", "healthy"])
def test_judging_a_stream_reads_no_other_streams_seats_one_by_one(shape, monkeypatch) -> None:
    # The streams ahead of a wait were found by a scan in id order, and the prefills during a
    # decode by a scan of every seat: 70,771 and 958,800 reads of a seat for 800 streams.
    n = 800
    records, polls = queue(n) if shape == "queue" else (healthy(n), [])
    server = {"max_num_seqs": 2, "source": "flags", "block_size": 16, "num_gpu_blocks": 1000}
    ctx = verdicts.build_context(records, Timeline(polls), manifest(server=server))
    reads = 0
    prefill_end = Seat.prefill_end_ns

    def counted(seat: Seat) -> int:
        nonlocal reads
        reads += 1
        return prefill_end.fget(seat)

    monkeypatch.setattr(Seat, "prefill_end_ns", property(counted))
    names = {v.name for v in verdicts.classify_streams(ctx).values()}
    assert names == ({"admission_cap", "admitted"} if shape == "queue" else {"admitted"})
    assert reads <= 2 * n


def test_a_decode_window_that_hundreds_of_prefills_overlap_reads_a_few(monkeypatch) -> None:
    # Closed-loop traffic at a thousand streams in flight: every stream decodes while hundreds
    # of others prefill. Listing them all for every stream was most of a 41,000-stream run's
    # analysis (190 s on the 16-core host); only the reported stretch names a few now.
    n = 800
    records = [
        stream(f"c{i:04d}", sent=i * 0.001, chunks=ticks(i * 0.001 + 0.0005, 5, 0.2))
        for i in range(n)
    ]
    ctx = verdicts.build_context(records, Timeline([]), manifest(server={"source": "flags"}))
    found = 0

    def counting(find: Any) -> Any:
        def counted(*a: Any) -> Any:
            nonlocal found
            for i in find(*a):
                found += 1
                yield i

        return counted

    monkeypatch.setattr(MaxTree, "where", counting(MaxTree.where))
    monkeypatch.setattr(Spans, "overlapping", counting(Spans.overlapping))
    assert {v.name for v in verdicts.classify_streams(ctx).values()} == {"admitted"}
    assert found <= 2 * n


def test_an_interval_tree_finds_exactly_the_intervals_in_a_window_in_order() -> None:
    rng = random.Random(9)
    spans = []
    for _ in range(45):
        a = rng.randint(0, 60)
        spans.append((a, a + rng.randint(1, 15)))
    tree = Spans(spans)
    for _ in range(300):
        t0, t1 = sorted(rng.randint(-5, 80) for _ in range(2))
        want = [i for i, (a, b) in enumerate(spans) if a < t1 and b > t0]
        assert list(tree.overlapping(t0, t1)) == want
