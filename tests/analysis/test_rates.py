"""Exact values for each timing formula on hand-built records."""

import pytest

from loadgen.analysis import rates

from support.run_fixtures import MS, record


def test_ttft_from_actual_and_intended_send():
    r = record()
    assert rates.ttft_s(r) == pytest.approx(0.100)
    assert rates.ttft_s(r, from_intended=True) == pytest.approx(0.105)


def test_decode_rate_splits_out_first_chunk_tokens():
    # 10 tokens, 1 in the first chunk: 9 tokens over 300 ms = 30 tok/s (not 10 / 0.406).
    r = record()
    assert rates.decode_tok_s(r) == pytest.approx(30.0)
    assert rates.chunks_per_s(r) == pytest.approx(10.0)
    assert rates.tpot_s(r) == pytest.approx(0.3 / 9)


def test_decode_rate_without_continuous_usage_assumes_one_first_token():
    r = record(chunk_tokens=None, token_source="usage_final")
    assert rates.decode_tok_s(r) == pytest.approx(30.0)


def test_decode_rate_none_for_single_chunk():
    r = record(chunks=1, chunk_ns=[105 * MS], chunk_tokens=[1], t_last_ns=105 * MS)
    assert rates.decode_tok_s(r) is None
    assert rates.tpot_s(r) is None


def test_chunk_and_token_gaps_spread_multi_token_chunks():
    r = record()
    assert rates.chunk_gaps_ns(r) == [100 * MS] * 3
    gaps = rates.token_gaps_ns(r)
    assert len(gaps) == 9
    assert gaps[0] == pytest.approx(100 * MS / 3)
    assert sum(gaps) == pytest.approx(300 * MS)


def test_token_gaps_without_chunk_tokens_keep_mean_exact():
    r = record(chunk_tokens=None, token_source="usage_final")
    gaps = rates.token_gaps_ns(r)
    assert gaps == [pytest.approx(100 * MS / 3)] * 3


def test_e2e():
    r = record()
    assert rates.e2e_s(r) == pytest.approx(0.401)
    assert rates.e2e_s(r, from_intended=True) == pytest.approx(0.406)


def test_a_stream_cut_short_has_no_e2e_but_keeps_its_ttft():
    # A cancelled stream's t_done is the moment of the cut, not an answer's end: an interrupted
    # run's latency table gave its e2e p50 as the cut (2.77 s of 0 ok streams).
    from loadgen.records import StreamError

    cut = record(status="error", error=StreamError("cancelled", "cancelled before the end"))
    assert rates.e2e_s(cut) is None and rates.e2e_s(cut, from_intended=True) is None
    assert rates.ttft_s(cut) == pytest.approx(0.100)


def test_no_content_gives_none():
    r = record(t_first_ns=None, t_last_ns=None, chunk_ns=[], chunk_tokens=None, chunks=0)
    assert rates.ttft_s(r) is None
    assert rates.decode_tok_s(r) is None
    assert rates.chunk_gaps_ns(r) == []
