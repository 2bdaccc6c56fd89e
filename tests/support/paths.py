"""Where the tests' inputs live, named once, so that no test's own folder decides them."""

from pathlib import Path

REPO = Path(__file__).parents[2]
# Records, logs, traces and scenarios the tests read (tests/data/README files say where each
# came from).
DATA = REPO / "tests" / "data"
SUPPORT = Path(__file__).parent
