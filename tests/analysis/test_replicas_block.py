"""The Replicas table's judgement of a failed replica (analysis/replicas.py): a transport error
it never served past is its failure; one it outlived, or an HTTP refusal, is not."""

from __future__ import annotations

import dataclasses

from loadgen.analysis.replicas import replicas_block
from loadgen.records import StreamRecord
from loadgen.run_manifest import ReplicaTargets

from support.run_fixtures import failed, stream

TARGETS = ReplicaTargets(("http://a", "http://b"), "round-robin", 4, 256)


def on(replica: int, rec: StreamRecord) -> StreamRecord:
    return dataclasses.replace(rec, replica=replica)


def block(recs: list[StreamRecord]):
    rows = {r.id: {"ttft_s": 0.01 if r.status == "ok" else None, "verdict": "admitted"}
            for r in recs}  # fmt: skip
    got = replicas_block(TARGETS, recs, rows, [], {"available": False})
    assert got is not None
    return got


def test_a_replica_that_never_served_again_failed_at_its_first_cut_stream() -> None:
    recs = [
        on(0, stream("a0", chunks=[0.1], done=0.2)), on(0, stream("a1", chunks=[1.1], done=3.0)),
        on(1, stream("b0", chunks=[0.1], done=0.5)),
        on(1, failed("b1", sent=0.4, done=0.9, cls="connection_closed")),
        on(1, failed("b2", sent=1.0, done=1.0, cls="connect_error")),
    ]  # fmt: skip
    got = block(recs)
    assert [(r.failed_at_s, r.failed_class) for r in got.rows] == [
        (None, None), (0.9, "connection_closed"),
    ]  # fmt: skip
    assert got.rows[1].errors == {"connect_error": 1, "connection_closed": 1}
    assert (got.total.streams, got.total.ok, got.total.failed_at_s) == (5, 3, None)


def test_a_dropped_stream_it_outlived_or_an_http_refusal_is_no_failure() -> None:
    recs = [
        on(0, failed("a0", sent=0.0, done=0.3, cls="connection_closed")),
        on(0, stream("a1", chunks=[0.5], done=0.6)),  # served after the drop
        on(1, stream("b0", chunks=[0.1], done=0.2)),
        on(1, failed("b1", sent=0.4, done=0.9, cls="http_503")),  # answering, refusing
    ]  # fmt: skip
    got = block(recs)
    assert [r.failed_at_s for r in got.rows] == [None, None]
    assert [r.errors for r in got.rows] == [{"connection_closed": 1}, {"http_503": 1}]


def test_a_run_without_targets_has_no_replicas_block() -> None:
    assert replicas_block(None, [], {}, [], {"available": False}) is None
