"""Hand-built runs that each produce one verdict (exact values), and the summary judged from
them."""

from __future__ import annotations

from typing import Any

from loadgen.analysis.inputs import RunInputs
from loadgen.analysis.summary import analyze

from support.run_fixtures import manifest, sample, stream, ticks


def summarize(
    streams,
    metrics=(),
    cap: int | None = None,
    source: str = "flags",
    pool_blocks: int | None = None,
) -> dict:
    server = {
        "max_num_seqs": cap,
        "source": source if cap else None,
        "block_size": 16,
        "num_gpu_blocks": pool_blocks,
    }
    return analyze(RunInputs(manifest(server=server), list(streams), list(metrics))).summary


def by_id(summary: dict) -> dict[str, dict[str, Any]]:
    return {s["id"]: s for s in summary["streams"]}


def whale_and_minnows():
    """The whale is sent first (1 ms ahead), as a scenario launching it together does."""
    w = stream("w", group="whale", prompt=60000, chunks=[60.0, *ticks(60.04, 10, 0.04)])
    minnows = [
        stream(f"m{i}", group="minnows", prompt=4000, sent=0.001, chunks=ticks(60.0 + i, 10, 0.05))
        for i in (1, 2, 3)
    ]
    return [w, *minnows]


def capped_streams(a_end: float = 1.0):
    return [
        stream("a", chunks=[0.1, *ticks(0.2, 9, 0.1)]),
        stream("b", chunks=[0.15, *ticks(0.2, 19, 0.1)]),
        stream("c", chunks=[1.101, *ticks(1.2, 14, 0.1)]),
        stream("d", chunks=[2.101, *ticks(2.2, 9, 0.1)]),
    ]


def cap_metrics():
    waiting = {0.0: 2, 0.5: 2, 1.0: 1, 1.5: 1, 2.0: 1, 2.5: 0, 3.0: 0}
    return [sample(t, running=2, waiting=w, kv=0.3) for t, w in waiting.items()]


def rationing_pair(during_gap: float):
    w = stream("w", group="whale", prompt=60000, chunks=[60.0, *ticks(60.04, 100, 0.04)])
    during = ticks(2.0 + during_gap, round(58 / during_gap), during_gap)
    m = stream("m", group="minnows", prompt=4000, chunks=[2.0, *during, *ticks(60.025, 200, 0.025)])
    return [w, m]


def server_verdict(row: dict) -> str:
    """A summary stream row's verdict as the server caused it: under client_limited (loadgen's
    own timing error past tolerance, which how busy the test machine is decides), the server
    verdict the flag keeps in its evidence."""
    return row["evidence"].get("server_verdict", row["verdict"])
