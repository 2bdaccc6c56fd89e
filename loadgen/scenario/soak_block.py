"""The scenario's `soak:` block and the duration words it (and `loadgen soak`) accept.

```yaml
soak:
  duration: 1h        # seconds, or 90s / 10m / 1.5h; on the server's clock (the sim's speed)
  window: thirds      # thirds of the requests by order of sending, or a fixed length: 5m
  concurrency: 1      # streams in flight, each replaced as soon as it ends (closed loop)
```
Traffic is the scenario's groups, one pass after another (each pass its own rep: fresh salts
and text), until the duration is up.
"""

from __future__ import annotations

import re

from loadgen.scenario.checks import Checker, Rule, integer
from loadgen.scenario.marked_yaml import MarkedMap
from loadgen.scenario.model import Soak

KEYS = ("duration", "window", "concurrency")
DEFAULT = Soak()


def parse_duration(spec: object) -> float | None:
    """Seconds from 90, `90`, `90s`, `10m`, `1.5h`; None when it is none of those or not > 0."""
    if isinstance(spec, bool):
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", str(spec).lower())
    if not m:
        return None
    value = float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]
    return value if value > 0 else None


def parse_window(spec: str) -> float | None:
    """None for `thirds`, else a fixed window length in seconds. ValueError (one line, naming
    the accepted forms) for anything else."""
    if str(spec).strip().lower() == "thirds":
        return None
    seconds = parse_duration(spec)
    if seconds is None:
        raise ValueError(f"window {spec!r}: use `thirds` or a length like 300s, 5m, 1h")
    return seconds


DURATION = Rule("a duration like 600, 10m or 1h", lambda v: parse_duration(v) is not None,
                convert=parse_duration)  # fmt: skip
WINDOW = Rule("thirds or a length like 5m", lambda v: _window_ok(v))


def _window_ok(v: object) -> bool:
    try:
        parse_window(str(v))
    except ValueError:
        return False
    return isinstance(v, str | int | float) and not isinstance(v, bool)


def soak(c: Checker, root: MarkedMap) -> Soak:
    m = c.mapping(root, "soak", "")
    c.keys(m, "soak", KEYS)
    return Soak(
        duration_s=c.field(m, "duration", "soak", DURATION, DEFAULT.duration_s),
        window=str(c.field(m, "window", "soak", WINDOW, DEFAULT.window)),
        concurrency=c.field(m, "concurrency", "soak", integer(1), DEFAULT.concurrency),
    )
