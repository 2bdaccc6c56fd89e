"""Order statistics and the canonical number format of every analysis output.

Percentiles use linear interpolation between closest ranks (numpy's default, "type 7"): with
sorted values x_0..x_{n-1}, pXX = x_i + f (x_{i+1} - x_i) where i + f = XX/100 (n - 1).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import orjson

PERCENTILES = (50, 90, 99)
# Every float in summary.json is cut to this many significant digits: enough for ns-derived
# seconds of hour-long runs, and the same bytes on every platform.
SIGNIFICANT_DIGITS = 9


def describe(values: Iterable[float | None]) -> dict[str, Any]:
    """n, min, median, max, mean and p50/p90/p99 of the non-None values (None when empty)."""
    xs = np.sort(np.array([v for v in values if v is not None], dtype=float))
    if xs.size == 0:
        out: dict[str, Any] = {"n": 0, "min": None, "median": None, "max": None, "mean": None}
        out.update({f"p{p}": None for p in PERCENTILES})
        return out
    return _tail(xs) | {
        "min": float(xs[0]),
        "median": float(np.median(xs)),
        "mean": float(xs.mean()),
    }


def tail(values: list[float]) -> dict[str, Any]:
    """n, p50/p90/p99 and max (None when empty): describe's without its median, mean and min.
    A report takes it twice a stream (its gaps), on a few values each: sorted in Python, not
    through numpy (whose percentile cost 50 us a call: 12 s of a 100,000-stream report)."""
    if not values:
        return {"n": 0, "max": None} | {f"p{p}": None for p in PERCENTILES}
    return _tail(sorted(values))


def _tail(xs: Sequence[float] | np.ndarray) -> dict[str, Any]:
    """The tail of ascending values."""
    out = {"n": len(xs), "max": float(xs[-1])}
    for p in PERCENTILES:
        out[f"p{p}"] = _percentile(xs, p)
    return out


def _percentile(xs: Sequence[float] | np.ndarray, p: int) -> float:
    """The module docstring's pXX of ascending values, in numpy's own float steps (its
    "linear" method: the index (n - 1) q, and from the upper neighbour when the fraction is
    0.5 or more), so the same values give the same bits either way."""
    at = (len(xs) - 1) * (p / 100)
    i = math.floor(at)
    if i >= len(xs) - 1:
        return float(xs[-1])
    a, b = float(xs[i]), float(xs[i + 1])
    frac = at - i
    return b - (b - a) * (1 - frac) if frac >= 0.5 else a + (b - a) * frac


def median(values: Iterable[float | None]) -> float | None:
    """Median of the non-None values, None when there are none."""
    xs = [v for v in values if v is not None]
    return float(np.median(xs)) if xs else None


def spread(values: Iterable[float | None]) -> float | None:
    """max - min of the non-None values (the rep-to-rep spread), None when there are none."""
    xs = [v for v in values if v is not None]
    return max(xs) - min(xs) if xs else None


# Leaves canonical() returns as they are, told by exact type (a subclass takes the long way).
_PLAIN = frozenset({str, int, bool, type(None)})


def canonical(obj: Any) -> Any:
    """A JSON-ready copy with floats cut to SIGNIFICANT_DIGITS, NaN/inf as None, tuples as lists
    and numpy scalars as Python numbers, so serialising it is byte-stable."""
    # Exact-type dispatch first, plain leaves copied without a call: the isinstance chain on
    # every leaf of a 20,000-stream summary cost 87 s of its report (bench/trace_scale.yaml).
    t = type(obj)
    if t is dict:
        return {
            k if type(k) is str else str(k): v if type(v) in _PLAIN else canonical(v)
            for k, v in obj.items()
        }
    if t is list:
        return [v if type(v) in _PLAIN else canonical(v) for v in obj]
    if t is float:
        return float(f"{obj:.{SIGNIFICANT_DIGITS}g}") if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): canonical(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [canonical(v) for v in obj]
    if isinstance(obj, bool | None | str):
        return obj
    if isinstance(obj, int | np.integer):
        return int(obj)
    if isinstance(obj, float | np.floating):
        return canonical(float(obj))
    raise TypeError(f"not JSON-serialisable: {type(obj).__name__}")


def dumps_canonical(obj: Any) -> bytes:
    """Sorted-key, 2-space indented JSON of canonical(obj), ending in a newline."""
    return dumps_made_canonical(canonical(obj))


def dumps_made_canonical(obj: Any) -> bytes:
    """dumps_canonical of a value canonical() already made: walked again, a 30,000-stream
    summary cost 1.5 s more for the same bytes."""
    return orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
