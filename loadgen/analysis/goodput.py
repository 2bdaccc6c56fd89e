"""Goodput: requests that meet every SLO, per second, beside plain throughput.

As vLLM's benchmark defines it (`--goodput ttft:MS tpot:MS e2el:MS`, after DistServe): a
request is good when it completed and each SLO given is met (TTFT from the actual send; TPOT
= decode window / decode tokens, the summary's `tpot_s`; E2E from the actual send); goodput =
good requests / the group's span (earliest intended send -> latest end), throughput = ok
requests / the same span. DistServe's own headline (the highest rate whose SLO attainment
stays >= 90%) needs a rate sweep; the attainment share here is its per-run ingredient.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from loadgen.analysis.aggregate import span_ns
from loadgen.analysis.registry import slo_metrics
from loadgen.codec import from_json
from loadgen.records import StreamRecord
from loadgen.scenario.limits import MAX_SECONDS

NS = 1_000_000_000
# SLO field -> (summary stream field, factor from the SLO's unit to the field's).
SLO_FIELDS = {key: (m.name, m.slo_factor) for key, m in slo_metrics().items()}
# --slo's short names (ttft, tpot, e2e) -> SLO field.
_SLO_FLAG_NAMES = {m.stem: key for key, m in slo_metrics().items()}


def meets(row: dict[str, Any], slo: dict[str, float]) -> bool:
    """A completed stream within every SLO given (a missing measurement fails it)."""
    if row["status"] != "ok":
        return False
    for key, limit in slo.items():
        field, factor = SLO_FIELDS[key]
        value = row[field]
        if value is None or value > limit * factor:
            return False
    return True


@dataclass(frozen=True, slots=True)
class GroupGoodput:
    """One group's requests against the SLOs over its span (first intended send -> last end)."""

    n: int
    ok: int
    good: int
    span_s: float
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


@dataclass(frozen=True, slots=True)
class Goodput:
    """summary.json's `goodput`: the SLOs applied, and each group's count against them."""

    slo: dict[str, int | float]  # as the file has them: a limit of 2 stays 2
    groups: Mapping[str, GroupGoodput]


def goodput(
    records: list[StreamRecord], rows: dict[str, dict[str, Any]], slo: dict[str, float] | None
) -> Goodput | None:
    """Per group: SLO attainment, goodput and throughput in requests/s (None without SLOs)."""
    if not slo:
        return None
    out: dict[str, GroupGoodput] = {}
    for group in sorted({r.group for r in records}):
        recs = [r for r in records if r.group == group]
        span = span_ns(recs)
        seconds = (span[1] - span[0]) / NS if span else 0.0
        good = sum(meets(rows[r.id], slo) for r in recs)
        out[group] = GroupGoodput(len(recs), sum(r.status == "ok" for r in recs), good, seconds)
    return Goodput(dict(slo), out)


def read_goodput(summary: Mapping[str, Any]) -> Goodput | None:
    """A run summary's goodput (None: no SLO was given)."""
    block = summary.get("goodput")
    return from_json(Goodput, block) if block else None


def parse_slo_flag(text: str) -> dict[str, float]:
    """`ttft=2,tpot=50,e2e=10` (TTFT and E2E in s, TPOT in ms) as SLO fields; ValueError with
    a one-line message otherwise."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or key.strip() not in _SLO_FLAG_NAMES:
            raise ValueError(
                f"--slo {text!r}: bad item {part!r} (expected ttft=S, tpot=MS, e2e=S, "
                "comma-separated)"
            )
        try:
            limit = float(value)
        except ValueError:
            raise ValueError(f"--slo {text!r}: {value!r} is not a number") from None
        # nan passed `<= 0` and inf (1e999 too) reached the report, which then crashed.
        if not 0 < limit <= MAX_SECONDS:
            raise ValueError(f"--slo {text!r}: {key} must be > 0 and <= {MAX_SECONDS:.0f}")
        if _SLO_FLAG_NAMES[key.strip()] in out:
            raise ValueError(f"--slo {text!r}: {key.strip()} given twice (expected each once)")
        out[_SLO_FLAG_NAMES[key.strip()]] = limit
    if not out:
        raise ValueError(f"--slo {text!r}: no SLO given (expected e.g. ttft=2,tpot=50)")
    return out
