"""What the tests of bench/'s scripts share."""

from __future__ import annotations

import importlib
import sys

import pytest

from support.paths import REPO


@pytest.fixture(scope="module")
def ceiling():
    """bench/ceiling.py as a module, with bench/ on the path as when it runs as a script."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        yield importlib.import_module("ceiling")
    finally:
        sys.path.remove(str(REPO / "bench"))
