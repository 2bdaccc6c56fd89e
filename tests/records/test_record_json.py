"""A stream record's JSON: every stored field, in field order, as dataclasses.asdict gave it
(the codec's generated writer), and back to the same record; and its values, as a client
worker hands them to the parent."""

from __future__ import annotations

import pickle
from dataclasses import asdict, fields, replace

import orjson

from loadgen.codec import to_json
from loadgen.records import StreamError, StreamRecord, read_stream, stream_values

# Kept in memory for a session's next request, never written (json_field omit="always").
UNSTORED = ("answer", "calls")


def full_record() -> StreamRecord:
    """A record with every field away from its default (numbers, lists, the error)."""
    rec = StreamRecord(
        id="a/r0/g/1", group="g", rep=0, status="error", error=StreamError("read_timeout", "x"),
        api="completions", model="m", prompt_tokens=8, requested_prompt_tokens=8,
        completion_tokens=3, cached_tokens=0, chunks=3, events=4, bytes=99,
        token_source="usage_final", finish_reason="length", http_status=200, t_intended_ns=1,
        t_sent_ns=2, t_headers_ns=3, t_first_ns=4, t_last_ns=6, t_done_ns=7,
        chunk_ns=[4, 5, 6], chunk_tokens=[1, 1, 1], max_tokens=3,
    )  # fmt: skip
    filled = {"answer": "abc", "calls": (("c1", "f", "{}"),), "replica": 1, "worker": "w1",
              "rtt_us": 50, "response_id": "cmpl-1", "cold": True, "seat_wait_ns": 9,
              "server_wait_ns": 11}  # fmt: skip
    return replace(rec, **filled)


def test_a_record_is_written_as_asdict_gave_it_without_the_unstored_fields() -> None:
    rec = full_record()
    want = asdict(rec)
    for name in UNSTORED:
        del want[name]
    want["error"] = {"class": "read_timeout", "message": "x"}
    got = to_json(rec)
    assert list(got) == list(want)
    assert orjson.dumps(got) == orjson.dumps(want)


def test_a_written_record_reads_back_the_same_but_its_unstored_fields() -> None:
    rec = full_record()
    back = read_stream(orjson.loads(orjson.dumps(to_json(rec))))
    assert back == replace(rec, **{f.name: f.default for f in fields(rec) if f.name in UNSTORED})


def test_a_records_values_make_the_same_record_again_every_field_in_its_place() -> None:
    # The parent rebuilds each worker's record positionally: a field out of order, keyword-only
    # or not in __init__ would land in another's place, or fail here.
    rec = StreamRecord(**{f.name: f"value of {f.name}" for f in fields(StreamRecord)})
    values = pickle.loads(pickle.dumps(stream_values(rec), protocol=pickle.HIGHEST_PROTOCOL))
    assert StreamRecord(*values) == rec
    assert StreamRecord(*stream_values(full_record())) == full_record()
