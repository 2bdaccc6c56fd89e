"""The soak report's drift sentences, composed from the verdict's case and numbers (exact
strings: these are what a reader of report.txt and `loadgen compare` sees)."""

from __future__ import annotations

from typing import Any

from loadgen.analysis.drift import Bootstrap, DriftVerdict, Trend
from loadgen.report.soak_report import drift_method, drift_reason

ADJ = Trend(-0.049, -0.053, -0.045, -0.262)
RAW = Trend(-0.71, -0.72, -0.70, -0.71)


def _verdict(name: str, case: Any, **kw: Any) -> DriftVerdict:
    fields = {"n": 200, "span_h": 1 / 6, "threshold": 0.025, "adjusted": ADJ, "raw": RAW} | kw
    return DriftVerdict(name, case, **fields)


AT_FIXED = "at fixed context -4.9% over the soak (CI -5.3% .. -4.5%; -26.2%/h)"


def test_each_case_says_what_decided_it() -> None:
    assert drift_reason(_verdict("drift", "beyond", context_change=0.1)) == (
        f"decode got slower: {AT_FIXED}; raw rate -71.0%, mean context +10.0%"
    )
    faster = Trend(0.051, 0.047, 0.055, 0.345)
    assert drift_reason(_verdict("drift", "beyond", adjusted=faster)).startswith(
        "decode got FASTER: at fixed context +5.1%"
    )
    assert drift_reason(_verdict("mix changed", "acceptance", acceptance_change=-0.04)) == (
        f"{AT_FIXED}, but speculative acceptance alone predicts -4.0%"
    )
    flat = Trend(-0.001, -0.008, 0.008, -0.001)
    assert drift_reason(_verdict("mix changed", "traffic", adjusted=flat, context_change=2.5)) == (
        "raw rate -71.0%, mean context +250.0%: the traffic changed, not the engine; at fixed "
        "context -0.1% over the soak (CI -0.8% .. +0.8%; -0.1%/h), inside +-2.5%"
    )
    # Without a measured context change the sentence leaves it out rather than guess it.
    assert drift_reason(_verdict("no drift", "inside", adjusted=flat, raw=flat)) == (
        "at fixed context -0.1% over the soak (CI -0.8% .. +0.8%; -0.1%/h), inside +-2.5%; "
        "raw rate -0.1%"
    )


def test_an_unresolved_verdict_says_what_would_resolve_it() -> None:
    few = _verdict("unresolved", "few_requests", n=11, adjusted=None, raw=None, needed_n=12)
    assert drift_reason(few) == "11 completed requests; at least 12 are needed for a trend"
    confounded = _verdict("unresolved", "confounded", adjusted=None, raw=None)
    assert drift_reason(confounded) == "time and context cannot be told apart in these requests"
    wide = Trend(-0.123, -0.236, 0.049, -0.928)
    straddles = _verdict("unresolved", "straddles", adjusted=wide, raw=wide, needed_n=43)
    assert drift_reason(straddles) == (
        "at fixed context -12.3% over the soak (CI -23.6% .. +4.9%; -92.8%/h) straddles "
        "+-2.5%; about 43 requests in all would resolve it; raw rate -12.3%"
    )
    on_line = _verdict("unresolved", "straddles", adjusted=wide, raw=wide, needed_n=None)
    assert "the effect sits on the threshold; no number of requests would settle it" in (
        drift_reason(on_line)
    )


def test_windows_left_out_are_named_only_when_there_are_some() -> None:
    v = _verdict("no drift", "inside", adjusted=Trend(0.0, -0.01, 0.01, 0.0), raw=RAW)
    assert drift_reason(v, 1, 3).startswith(
        "1 of 3 windows left out (the client fell behind): at fixed context +0.0%"
    )
    assert drift_reason(v, 0, 3).startswith("at fixed context +0.0%")


def test_the_method_names_the_bootstrap_that_drew_the_ci() -> None:
    v = _verdict("drift", "beyond", bootstrap=Bootstrap(resamples=500, seed=3, ci_level=0.9))
    assert drift_method(v) == (
        "OLS of log(decode rate) on time, log(context) and its square; moving-block bootstrap "
        "(500 resamples, seed 3), 90% CI; threshold +-2.5% over the soak"
    )
