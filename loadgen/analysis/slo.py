"""The SLO grammar every command's `--slo` takes, and its one parser.

An item is `metric_pNN=limit` (TTFT and E2E in s, TPOT in ms): at least NN% of the judged
streams must have the metric within the limit; a bare `metric=limit` takes the command's share
(`--attain` for capacity, else DEFAULT_ATTAIN). `run --slo ttft_p90=1` was a "bad item" while
`capacity --slo ttft_p90=1` worked: two parsers, two grammars.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from loadgen.analysis.registry import slo_metrics
from loadgen.scenario.limits import MAX_SECONDS

# Item metric -> (summary stream field, factor from the item's unit to the field's, unit).
METRICS = {m.stem: (m.name, m.slo_factor, m.slo_unit) for m in slo_metrics().values()}
# Item metric -> the SLO field a scenario's `slo:` block and goodput name it by (`tpot_ms`).
SLO_KEYS = {m.stem: key for key, m in slo_metrics().items()}
DEFAULT_ATTAIN = 0.9
SLO_HELP = (
    "metric_pNN=limit, comma-separated: ttft and e2e in s, tpot in ms; pNN is the share of "
    "streams that must be within the limit (a bare metric=limit: p90)"
)


@dataclass(frozen=True, slots=True)
class SloItem:
    metric: str  # ttft | tpot | e2e
    limit: float  # in the metric's unit (s, ms, s)
    share: float  # the share of streams that must be within it
    json_derived: ClassVar[tuple[str, ...]] = ("name", "unit")

    @property
    def name(self) -> str:
        return f"{self.metric}_p{self.share * 100:g}"

    @property
    def unit(self) -> str | None:
        return METRICS[self.metric][2]

    @property
    def key(self) -> str:
        """The SLO field this item bounds (`ttft_s`, `tpot_ms`, `e2e_s`)."""
        return SLO_KEYS[self.metric]


def parse_slo(text: str, attain: float = DEFAULT_ATTAIN) -> tuple[SloItem, ...]:
    """`ttft_p90=2,tpot_p90=50,e2e_p99=20` (or `ttft=2`, share `attain`) as items; ValueError
    with a one-line message naming the flag, the grammar and the units otherwise."""
    items: list[SloItem] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        metric, _, pct = key.strip().partition("_p")
        if not sep or metric not in METRICS:
            raise ValueError(f"--slo {text!r}: bad item {part!r} (expected {SLO_HELP})")
        share = attain
        if pct:
            try:
                share = float(pct) / 100
            except ValueError:
                raise ValueError(f"--slo {text!r}: {key!r}: pNN must be a number") from None
            if not 0 < share <= 1:
                raise ValueError(f"--slo {text!r}: {key!r}: pNN must be in (0, 100]")
        try:
            limit = float(value)
        except ValueError:
            raise ValueError(f"--slo {text!r}: {value!r} is not a number") from None
        unit = METRICS[metric][2]
        # nan passed `<= 0` and inf (1e999 too) reached the report, which then crashed.
        bound = MAX_SECONDS * (1e3 if unit == "ms" else 1)
        if not 0 < limit <= bound:
            raise ValueError(f"--slo {text!r}: {key} must be > 0 and <= {bound:.0f} {unit}")
        if any(i.metric == metric for i in items):
            raise ValueError(f"--slo {text!r}: {metric} given twice (expected each once)")
        items.append(SloItem(metric, limit, share))
    if not items:
        raise ValueError(f"--slo {text!r}: no SLO given (expected e.g. ttft_p90=2,tpot_p90=50)")
    return tuple(items)
