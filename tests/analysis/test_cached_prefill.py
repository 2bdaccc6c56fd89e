"""Item 15 of issue #10: a prompt served from the prefix cache is not prefilled, so it neither
counts in a stream's normal prefill time nor sets the prefill baseline (306k tok/s warm against
17k cold), whether or not the server reports usage cached_tokens."""

from __future__ import annotations

import pytest

from loadgen.analysis.baselines import expected_prefill_s, group_min_ttft, prefill_baseline
from loadgen.analysis.cached import estimate_cached
from loadgen.analysis.timeline import Timeline
from loadgen.analysis.verdicts import build_context
from loadgen.codec import to_json
from loadgen.run_manifest import CacheCheck

from support.run_fixtures import manifest, sample, stream, ticks


def _cold_then_warm():
    """A cold 4k minnow, then alone a 72.6k whale the server had cached (vLLM without
    --enable-prompt-tokens-details: no cached_tokens in usage)."""
    cold = stream("cold", prompt=4000, sent=0.0, chunks=ticks(0.235, 4, 0.01))
    warm = stream("warm", group="whale", prompt=72600, sent=10.0, chunks=ticks(10.237, 4, 0.01))
    metrics = [sample(-0.1, hits=0), sample(0.5, hits=0), sample(9.9, hits=0),
               sample(10.5, hits=72592), sample(11.0, hits=72592)]  # fmt: skip
    return [cold, warm], Timeline(metrics)


def test_counter_witnesses_cached_tokens_and_the_baseline_leaves_the_hit_out():
    records, timeline = _cold_then_warm()
    est = estimate_cached(records, timeline, manifest())
    assert est.tokens == {"cold": 0, "warm": 72592}
    assert est.source == {"cold": "no_hits", "warm": "prefix_hits_counter"}
    base = prefill_baseline(records, est.tokens, est.suspect)
    assert base.tok_s == pytest.approx(4000 / 0.235)  # 17021.3, not the whale's 306329
    assert (base.source, base.streams, base.cached_excluded) == (
        "uncontended_streams", ("cold",), ("warm",),
    )  # fmt: skip
    # The whale's normal prefill is its 8 uncached tokens at the cold rate.
    expected = expected_prefill_s(records[1], base, group_min_ttft(records), 72592)
    assert expected == pytest.approx(8 / (4000 / 0.235))


def test_the_verdict_context_uses_the_estimate():
    records, timeline = _cold_then_warm()
    ctx = build_context(records, timeline, manifest())
    assert ctx.baseline.tok_s == pytest.approx(4000 / 0.235)


def test_usage_cached_tokens_and_prime_checks_are_subtracted():
    # Reported by usage: 1000 of 4000 cached, so 3000 prefilled in 0.1 s.
    reported = stream("r", prompt=4000, cached=1000, sent=0.0, chunks=ticks(0.1, 3, 0.01))
    # Primed group, no usage details: its rep's prefix (1000 tokens, block 16) verified warm.
    primed = stream("p", group="primed", prompt=3000, sent=5.0, chunks=ticks(5.05, 3, 0.01))
    check = CacheCheck("primed", 0, "k", 1000, 16, "sim", 1.0, 0.1, 992.0, True, "r",
                       "healthy")  # fmt: skip
    run = manifest(cache_checks=[to_json(check)])
    est = estimate_cached([reported, primed], Timeline([]), run)
    assert est.tokens == {"r": 1000, "p": 992}
    assert est.source == {"r": "usage", "p": "prime_check"}
    base = prefill_baseline([reported, primed], est.tokens, est.suspect)
    # Both alone, both mostly prefilled: median of 3000 / 0.1 and 2008 / 0.05.
    assert base.tok_s == pytest.approx((30000 + 40160) / 2)
    assert base.cached_excluded == ()
    # Mostly served from cache: no prefill measurement, left out.
    hit = stream("h", prompt=4000, cached=3000, sent=9.0, chunks=ticks(9.02, 3, 0.01))
    base = prefill_baseline([reported, primed, hit], {**est.tokens, "h": 3000}, est.suspect)
    assert base.cached_excluded == ("h",) and base.tok_s == pytest.approx(35080)


def test_a_warm_stream_sharing_the_server_is_suspect_not_a_baseline():
    # Sent together; the counter rose, and nobody can say whose hits they were.
    a = stream("a", prompt=4000, sent=0.0, chunks=ticks(0.3, 3, 0.01))
    b = stream("b", prompt=4000, sent=0.0, chunks=ticks(0.02, 3, 0.01))
    timeline = Timeline([sample(-0.1, hits=0), sample(0.5, hits=3984)])
    est = estimate_cached([a, b], timeline, manifest())
    assert est.suspect == frozenset({"a", "b"}) and est.tokens == {}
    base = prefill_baseline([a, b], est.tokens, est.suspect)
    assert (base.tok_s, base.source, base.cached_excluded) == (None, "none", ("a", "b"))
