"""Goodput: requests that meet every SLO, per second, beside plain throughput.

As vLLM's benchmark defines it (`--goodput ttft:MS tpot:MS e2el:MS`, after DistServe): a
request is good when it completed and each SLO given is met (TTFT from the actual send; TPOT
= decode window / decode tokens, the summary's `tpot_s`; E2E from the actual send); goodput =
good requests / the group's span (earliest intended send -> latest end), throughput = ok
requests / the same span. DistServe's own headline (the highest rate whose SLO attainment
stays >= 90%) needs a rate sweep; the attainment share here is its per-run ingredient.
Each SLO also carries its share (analysis/slo.py's grammar: `ttft_p90=2`, a bare item p90), and
per group the streams within each SLO alone are counted, so a run says whether its pNN held.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from loadgen.analysis.aggregate import span_ns
from loadgen.analysis.registry import slo_metrics
from loadgen.analysis.slo import DEFAULT_ATTAIN, SLO_KEYS, SloItem
from loadgen.codec import from_json
from loadgen.records import StreamRecord

NS = 1_000_000_000
# SLO field -> (summary stream field, factor from the SLO's unit to the field's).
SLO_FIELDS = {key: (m.name, m.slo_factor) for key, m in slo_metrics().items()}


def within_slo(row: dict[str, Any], key: str, limit: float) -> bool:
    """A completed stream within one SLO (a missing measurement fails it)."""
    field, factor = SLO_FIELDS[key]
    value = row[field]
    return row["status"] == "ok" and value is not None and value <= limit * factor


def meets(row: dict[str, Any], slo: Mapping[str, float]) -> bool:
    """A completed stream within every SLO given."""
    return all(within_slo(row, key, limit) for key, limit in slo.items())


@dataclass(frozen=True, slots=True)
class GroupGoodput:
    """One group's requests against the SLOs over its span (first intended send -> last end)."""

    n: int
    ok: int
    good: int
    span_s: float
    within: Mapping[str, int] = field(default_factory=dict)  # per SLO: streams within it alone
    json_derived: ClassVar[tuple[str, ...]] = ("attainment", "goodput_req_s", "throughput_req_s")

    @property
    def attainment(self) -> float | None:
        return self.good / self.n if self.n else None

    @property
    def goodput_req_s(self) -> float | None:
        return self.good / self.span_s if self.span_s > 0 else None

    @property
    def throughput_req_s(self) -> float | None:
        return self.ok / self.span_s if self.span_s > 0 else None

    def holds(self, key: str, share: float) -> bool:
        """Whether at least `share` of the group's streams were within SLO `key`."""
        return self.n > 0 and self.within.get(key, 0) >= share * self.n


@dataclass(frozen=True, slots=True)
class Goodput:
    """summary.json's `goodput`: the SLOs applied with the share of streams each must hold
    for, and each group's count against them."""

    slo: dict[str, int | float]  # as the file has them: a limit of 2 stays 2
    groups: Mapping[str, GroupGoodput]
    shares: Mapping[str, float] = field(default_factory=dict)

    @property
    def items(self) -> tuple[SloItem, ...]:
        """Each SLO as an item of the --slo grammar (`ttft_p90`, its limit and unit)."""
        metric = {key: stem for stem, key in SLO_KEYS.items()}
        return tuple(SloItem(metric[k], v, self.shares.get(k, DEFAULT_ATTAIN))
                     for k, v in self.slo.items())  # fmt: skip


def goodput(
    records: list[StreamRecord],
    rows: dict[str, dict[str, Any]],
    slo: Mapping[str, float] | None,
    shares: Mapping[str, float] | None = None,
) -> Goodput | None:
    """Per group: SLO attainment, goodput and throughput in requests/s, and the streams within
    each SLO (None without SLOs); an SLO without a share in `shares` takes DEFAULT_ATTAIN."""
    if not slo:
        return None
    out: dict[str, GroupGoodput] = {}
    for group in sorted({r.group for r in records}):
        recs = [r for r in records if r.group == group]
        span = span_ns(recs)
        seconds = (span[1] - span[0]) / NS if span else 0.0
        good = sum(meets(rows[r.id], slo) for r in recs)
        within = {k: sum(within_slo(rows[r.id], k, v) for r in recs) for k, v in slo.items()}
        ok = sum(r.status == "ok" for r in recs)
        out[group] = GroupGoodput(len(recs), ok, good, seconds, within)
    given = shares or {}
    return Goodput(dict(slo), out, {k: given.get(k, DEFAULT_ATTAIN) for k in slo})


def read_goodput(summary: Mapping[str, Any]) -> Goodput | None:
    """A run summary's goodput (None: no SLO was given)."""
    block = summary.get("goodput")
    return from_json(Goodput, block) if block else None
