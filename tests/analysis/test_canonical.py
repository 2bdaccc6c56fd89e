"""stats.canonical: the exact-type fast path and the isinstance fallback give the same copy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from loadgen.analysis.stats import canonical, dumps_canonical


class _Str(str):
    pass


class _Dict(dict):
    pass


class _Float(float):
    pass


def test_floats_cut_to_nine_digits_and_short_ones_kept() -> None:
    assert canonical([1.23456789012, 0.1, -0.0, 2.5]) == [1.23456789, 0.1, -0.0, 2.5]


def test_non_finite_floats_become_none_plain_and_numpy() -> None:
    got = canonical([math.nan, math.inf, -math.inf, np.float64("nan"), np.float32("inf")])
    assert got == [None, None, None, None, None]


def test_plain_leaves_kept_and_keys_stringified() -> None:
    assert canonical({1: True, "a": None, 2.5: "x", None: 3}) == {
        "1": True,
        "a": None,
        "2.5": "x",
        "None": 3,
    }


def test_tuples_numpy_and_subclasses_take_the_fallback() -> None:
    got = canonical(
        (np.int64(3), np.float64(1.23456789012), _Float(2.123456789123), _Dict(z=(1, 2.0)))
    )
    assert got == [3, 1.23456789, 2.12345679, {"z": [1, 2.0]}]
    assert type(got[0]) is int and type(got[1]) is float and type(got[2]) is float
    assert canonical([_Str("y")]) == ["y"]


def test_unserialisable_leaf_named() -> None:
    with pytest.raises(TypeError, match="not JSON-serialisable: set"):
        canonical({"a": [{1, 2}]})


def test_dumps_sorted_indented_with_newline() -> None:
    assert (
        dumps_canonical({"b": 1.0000000001, "a": [None]})
        == b'{\n  "a": [\n    null\n  ],\n  "b": 1.0\n}\n'
    )
