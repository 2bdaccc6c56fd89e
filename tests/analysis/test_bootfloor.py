"""The boot-floor verdict, checked against the seed's LOOKUP numbers (seed 002)."""

from __future__ import annotations

import pytest

from loadgen.analysis.bootfloor import (
    BY_CONSTRUCTION,
    STANDS,
    UNRESOLVED,
    arm_spread,
    boot_floor,
    compare_arms,
    floor_verdict,
)

PROSE = {"LOOKUP=1": [142.85, 142.89, 142.78], "LOOKUP=0": [157.64, 157.54]}
CODE = {"LOOKUP=1": [185.53, 185.41, 185.50], "LOOKUP=0": [185.63, 185.57]}


def test_seed_prose_effect_stands_about_150x_the_floor() -> None:
    (row,) = compare_arms("prose tok/s", PROSE)
    assert row.reference_value == pytest.approx(142.84)
    assert row.value == pytest.approx(157.59)
    assert round(100 * row.effect, 1) == 10.3
    # Worst spread: arm 1, 0.11 / 142.84.
    assert row.floor == pytest.approx(0.11 / 142.84)
    assert round(100 * row.floor, 3) == 0.077
    assert round(row.multiple, 1) == 134.1
    assert row.verdict == STANDS


def test_seed_code_effect_is_inside_the_floor() -> None:
    (row,) = compare_arms("code tok/s", CODE)
    assert round(100 * row.effect, 2) == 0.06
    assert round(100 * row.floor, 3) == 0.065  # arm 1: 0.12 / 185.48
    assert round(row.multiple, 1) == 1.0
    assert row.verdict == UNRESOLVED


def test_one_boot_per_arm_is_unresolved_by_construction() -> None:
    (row,) = compare_arms("wall", {"a": [10.0], "b": [20.0]})
    assert row.effect == pytest.approx(1.0)
    assert row.floor is None and row.multiple is None
    assert row.verdict == BY_CONSTRUCTION


def test_one_arm_with_one_boot_removes_the_floor() -> None:
    assert boot_floor({"a": [1.0, 1.1], "b": [2.0]}) is None


def test_the_stands_threshold_is_strictly_above_twice_the_floor() -> None:
    assert floor_verdict(0.02, 0.01) == (2.0, UNRESOLVED)
    assert floor_verdict(0.0201, 0.01)[1] == STANDS


def test_boots_that_agree_exactly_let_any_difference_stand() -> None:
    assert floor_verdict(0.5, 0.0) == (None, STANDS)
    assert floor_verdict(0.0, 0.0) == (None, UNRESOLVED)


def test_a_boot_that_measured_nothing_is_left_out() -> None:
    assert arm_spread([1.0, None, 1.5]) == pytest.approx(0.4)
    assert arm_spread([1.0, None]) is None


def test_every_arm_is_set_against_the_first() -> None:
    rows = compare_arms("m", {"a": [1.0, 1.0], "b": [2.0, 2.0], "c": [0.5, 0.5]})
    assert [(r.reference, r.arm, r.effect) for r in rows] == [("a", "b", 1.0), ("a", "c", -0.5)]
