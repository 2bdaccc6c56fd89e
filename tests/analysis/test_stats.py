"""Order statistics: describe's figures, and tail's subset of them, the same to the bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.analysis.stats import describe, tail

TAIL_KEYS = ("n", "max", "p50", "p90", "p99")


def test_describe_interpolates_between_closest_ranks() -> None:
    d = describe([10.0, None, 1.0, 3.0, 2.0, 4.0])
    assert (d["n"], d["min"], d["median"], d["max"], d["mean"]) == (5, 1.0, 3.0, 10.0, 4.0)
    # p90 at rank 0.9 * 4 = 3.6: 4 + 0.6 * (10 - 4); p99 at 3.96.
    assert d["p50"] == 3.0
    assert d["p90"] == pytest.approx(7.6, rel=1e-12)
    assert d["p99"] == pytest.approx(9.76, rel=1e-12)


@pytest.mark.parametrize(
    "values", [[], [0.25], [5.0, 1.0], [0.1 * i for i in range(15)], [3.0, 3.0, 9.5, 0.0, 7.25]]
)
def test_tail_is_describes_tail_to_the_bit(values: list[float]) -> None:
    whole = describe(values)
    assert tail(values) == {k: whole[k] for k in TAIL_KEYS}


@settings(max_examples=400, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=64))
def test_percentiles_are_numpys_linear_ones_to_the_bit(values: list[float]) -> None:
    expected = [float(v) for v in np.percentile(np.array(values), (50, 90, 99))]
    assert [tail(values)[k] for k in ("p50", "p90", "p99")] == expected
    assert [describe(values)[k] for k in ("p50", "p90", "p99")] == expected
