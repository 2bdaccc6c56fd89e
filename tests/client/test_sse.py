"""The SSE parser and the per-event decoder: exact events, chunks and tokens from known bytes."""

from __future__ import annotations

import orjson
from hypothesis import example, given, settings
from hypothesis import strategies as st

from loadgen.client.decode import StreamDecoder
from loadgen.client.sse import DONE, MESSAGE, SSEParser
from loadgen.request import StreamRequest

STREAM = (
    b": keep-alive\n\n"
    b'data: {"a": 1}\n\n'
    b"event: error\n"
    b'data: {"error": {"message": "boom"}}\n\n'
    b"id: 7\n"
    b"data: line one\n"
    b"data:line two\n\n"
    b": ping\n"
    b"retry: 10\n\n"
    b"data: [DONE]\n\n"
)
EXPECTED = [
    (b'{"a": 1}', MESSAGE),
    (b'{"error": {"message": "boom"}}', "error"),
    (b"line one\nline two", MESSAGE),
    (DONE, MESSAGE),
]


def feed_all(parser: SSEParser, pieces: list[bytes]) -> list:
    out = []
    for p in pieces:
        out.extend(parser.feed(p))
    return out


def with_line_ends(raw: bytes, end: bytes) -> bytes:
    return raw.replace(b"\n", end)


def test_whole_stream_gives_each_event_once() -> None:
    parser = SSEParser()
    assert parser.feed(STREAM) == EXPECTED
    assert parser.parse_errors == 0
    assert parser.last_id == "7"
    assert not parser.pending


def test_split_at_every_byte_boundary_for_each_line_end() -> None:
    for end in (b"\n", b"\r\n", b"\r"):
        raw = with_line_ends(STREAM, end)
        for cut in range(len(raw) + 1):
            parser = SSEParser()
            assert feed_all(parser, [raw[:cut], raw[cut:]]) == EXPECTED, (end, cut)
            assert parser.parse_errors == 0
        one_by_one = [raw[i : i + 1] for i in range(len(raw))]
        assert feed_all(SSEParser(), one_by_one) == EXPECTED, end


def test_crlf_split_between_cr_and_lf_is_one_line_end() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: x\r") == []
    assert parser.feed(b"\n\r") == [(b"x", MESSAGE)]  # the lone CR already ends a line
    assert parser.feed(b"\ndata: y\r\n\r\n") == [(b"y", MESSAGE)]  # this LF is its pair


def test_comments_and_keepalives_make_no_event() -> None:
    parser = SSEParser()
    assert parser.feed(b": keep-alive\n\n:\n\n: ping\r\n\r\n") == []
    assert parser.parse_errors == 0


def test_event_name_applies_to_its_own_event_only() -> None:
    parser = SSEParser()
    events = parser.feed(b"event: usage\n\nevent: error\ndata: 1\n\ndata: 2\n\n")
    assert events == [(b"1", "error"), (b"2", MESSAGE)]


def test_data_without_space_and_empty_data_line() -> None:
    assert SSEParser().feed(b"data:x\n\ndata\n\n") == [(b"x", MESSAGE), (b"", MESSAGE)]


def test_partial_event_is_pending_and_not_returned() -> None:
    parser = SSEParser()
    assert parser.feed(b'data: {"choices": [') == []
    assert parser.pending


def test_garbage_line_is_a_parse_error_and_parsing_goes_on() -> None:
    parser = SSEParser()
    events = parser.feed(b"\xff\xfe garbage\n\ndata: 1\n\n")
    assert events == [(b"1", MESSAGE)]
    assert parser.parse_errors == 1
    assert parser.first_error is not None and "not an SSE line" in parser.first_error


def test_oversized_event_is_dropped_as_a_parse_error() -> None:
    parser = SSEParser(max_event_bytes=100)
    assert parser.feed(b"data: " + b"x" * 60) == []
    assert parser.feed(b"y" * 60) == []
    assert parser.parse_errors == 1
    assert not parser.pending


def cut(raw: bytes, cuts: list) -> list[bytes]:
    """`raw` split at the given offsets (taken modulo its length + 1)."""
    pieces, prev = [], 0
    for c in sorted(c % (len(raw) + 1) for c in cuts):
        pieces.append(raw[prev:c])
        prev = c
    pieces.append(raw[prev:])
    return pieces


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.lists(st.integers(0, 400), max_size=8))
def test_arbitrary_bytes_never_raise_and_splits_do_not_matter(raw: bytes, cuts: list) -> None:
    whole = SSEParser()
    expected = whole.feed(raw)
    split = SSEParser()
    assert feed_all(split, cut(raw, cuts)) == expected
    assert split.parse_errors == whole.parse_errors


def test_an_oversized_line_is_skipped_to_its_end_without_being_kept() -> None:
    parser = SSEParser(max_event_bytes=100)
    out = feed_all(parser, [b"data: a\n\ndata: " + b"x" * 90, b"x" * 500, b"x" * 500 + b"\n"])
    assert (out, parser.oversized, len(parser._buf)) == ([(b"a", MESSAGE)], 1, 0)
    assert parser.feed(b"\ndata: b\n\n") == [(b"b", MESSAGE)]
    assert parser.parse_errors == 1 and "larger than 100 bytes" in (parser.first_error or "")


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 120), min_size=1, max_size=6),
    st.lists(st.integers(0, 1000), max_size=8),
    st.booleans(),
)
@example(sizes=[22, 54, 0, 0, 0, 92], cuts=[91], crlf=False)  # cut inside the blank line
def test_the_size_cap_drops_the_same_events_however_the_bytes_are_split(
    sizes: list, cuts: list, crlf: bool
) -> None:
    raw = b"".join(b"data: " + b"x" * n + b"\n\n" for n in sizes)
    if crlf:
        raw = raw.replace(b"\n", b"\r\n")
    whole = SSEParser(max_event_bytes=60)
    expected = whole.feed(raw)
    split = SSEParser(max_event_bytes=60)
    assert (
        feed_all(split, cut(raw, cuts))
        == expected
        == [(b"x" * n, MESSAGE) for n in sizes if n <= 54]
    )
    assert split.oversized == whole.oversized == sum(n > 54 for n in sizes)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_become_recorded_parse_errors(raw: bytes) -> None:
    parser = SSEParser()
    parser.feed(b"\x00" + raw + b"\n\n")  # a line that starts with no SSE field name
    assert parser.parse_errors >= 1
    dec = StreamDecoder(chat=False)
    dec.feed(b"data: \x00" + raw.replace(b"\n", b"").replace(b"\r", b"") + b"\n\n", 1)
    assert dec.parse_errors == 1
    assert dec.error is not None and dec.error.cls == "malformed_sse"
    assert dec.chunk_ns == []


KEYS = ["choices", "usage", "delta", "text", "content", "reasoning_content", "finish_reason",
        "completion_tokens", "prompt_tokens", "prompt_tokens_details", "cached_tokens", "error",
        "message"]  # fmt: skip
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(KEYS), inner),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(JSON, max_size=5), st.booleans())
def test_any_json_shape_never_raises_out_of_the_decoder(objs: list, chat_api: bool) -> None:
    dec = StreamDecoder(chat=chat_api)
    for i, obj in enumerate(objs):
        dec.feed(b"data: " + orjson.dumps(obj) + b"\n\n", i)
    rec = dec.to_record(
        StreamRequest(id="x", model="m", prompt="p", max_tokens=1),
        run_start_ns=0,
        http_status=200,
        t_sent=0,
        t_headers=0,
        t_end=10,
        error=dec.error,
    )
    assert rec.chunks == len(rec.chunk_ns) and rec.events == len(objs)
    assert isinstance(rec.completion_tokens, int)


# ---------------------------------------------------------------- decoder: chunks vs tokens


def event(obj: dict) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def completion(text: str, ct: int | None = None, finish: str | None = None) -> bytes:
    obj: dict = {"choices": [{"index": 0, "text": text, "finish_reason": finish}]}
    if ct is not None:
        obj["usage"] = {"prompt_tokens": 5, "completion_tokens": ct, "total_tokens": 5 + ct}
    return event(obj)


def chat(delta: dict, ct: int | None = None, finish: str | None = None) -> bytes:
    obj: dict = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if ct is not None:
        obj["usage"] = {"prompt_tokens": 5, "completion_tokens": ct, "total_tokens": 5 + ct}
    return event(obj)


def usage_only(ct: int, cached: int | None = None) -> bytes:
    usage: dict = {"prompt_tokens": 5, "completion_tokens": ct, "total_tokens": 5 + ct}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return event({"choices": [], "usage": usage})


def decode(chat_api: bool, *events: bytes) -> StreamDecoder:
    dec = StreamDecoder(chat=chat_api)
    for i, e in enumerate(events):
        dec.feed(e, 1000 * (i + 1))
    return dec


def test_three_token_continuous_delta_counts_three_tokens_in_one_chunk() -> None:
    dec = decode(
        False,
        completion(" a", 1),
        completion(" b c d", 4),
        completion(" e f g", 7, "length"),
        usage_only(7),
        event_done(),
    )
    assert dec.token_counts() == (7, [1, 3, 3], "usage_continuous")
    assert dec.chunk_ns == [1000, 2000, 3000]
    assert dec.events == 4  # the usage-only event counts as an event, [DONE] does not
    assert dec.done_ns == 5000
    assert dec.finish_reason == "length"


def event_done() -> bytes:
    return b"data: [DONE]\n\n"


def test_role_only_and_empty_deltas_are_not_chunks() -> None:
    dec = decode(
        True,
        chat({"role": "assistant", "content": ""}, 0),
        chat({"content": "hi"}, 1),
        chat({}, 1),
        chat({"reasoning_content": "hmm"}, 2),
        chat({"content": ""}, 3, "stop"),  # a token that decodes to "": usage says it is one
        usage_only(3),
        event_done(),
    )
    assert dec.chunk_ns == [2000, 4000, 5000]
    assert dec.token_counts() == (3, [1, 1, 1], "usage_continuous")


def test_final_usage_only_gives_usage_final_and_no_per_chunk_tokens() -> None:
    dec = decode(False, completion(" a"), completion(" b"), usage_only(6, cached=4), event_done())
    assert dec.token_counts() == (6, None, "usage_final")
    assert len(dec.chunk_ns) == 2
    rec = dec.to_record(
        StreamRequest(id="x", model="m", prompt="p", max_tokens=6),
        run_start_ns=500,
        http_status=200,
        t_sent=600,
        t_headers=700,
        t_end=9000,
        error=None,
    )
    assert (rec.chunk_ns, rec.t_first_ns, rec.t_last_ns, rec.t_done_ns) == (
        [500, 1500],
        500,
        1500,
        3500,
    )
    assert (rec.prompt_tokens, rec.cached_tokens, rec.chunks, rec.events) == (5, 4, 2, 3)
    assert (rec.t_sent_ns, rec.t_headers_ns, rec.chunk_tokens) == (100, 200, None)


def test_usage_first_seen_on_the_finishing_chunk_is_final_not_continuous() -> None:
    # llama.cpp puts the only usage on its last chunk, which carries no new token.
    dec = decode(False, completion(" a"), completion(" b"), completion("", 2, "length"))
    assert dec.token_counts() == (2, None, "usage_final")
    assert dec.chunk_ns == [1000, 2000]


def test_a_lone_token_that_decodes_to_empty_text_arrives_on_the_finishing_event() -> None:
    # max_tokens 1 on a random-weight model: one event, text "", finish, usage says 1 token.
    dec = decode(False, completion("", 1, "length"), event_done())
    assert dec.chunk_ns == [1000]
    assert dec.token_counts() == (1, None, "usage_final")


def test_no_usage_falls_back_to_chunk_count() -> None:
    dec = decode(True, chat({"role": "assistant"}), chat({"content": "x"}), chat({"content": "y"}))
    assert dec.token_counts() == (2, None, "chunk_count")
    assert not dec.finished


def test_error_event_and_malformed_json_are_recorded_and_reading_goes_on() -> None:
    dec = decode(False, completion(" a", 1), b"data: {nope\n\n", completion(" b", 2))
    assert dec.error is not None and dec.error.cls == "malformed_sse"
    assert dec.parse_errors == 1
    assert dec.token_counts() == (2, [1, 1], "usage_continuous")
    err = decode(False, completion(" a", 1), event({"error": {"message": "oom", "code": 500}}))
    assert err.error is not None and (err.error.cls, err.error.message) == (
        "server_error_event",
        "oom",
    )
    named = decode(False, b"event: error\ndata: engine died\n\n")
    assert named.error is not None and named.error.cls == "server_error_event"
