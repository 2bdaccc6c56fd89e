"""The fidelity of a calibrated sim: one scenario measured on a real server and predicted on the
virtual clock with the profile fitted to it, figure by figure, with the signed error
(predicted / measured - 1) and whether it lies within the tolerance.

Per arm and group: TTFT median and p90 (s) and the decode-only rate median (tok/s, usage
tokens after the first chunk over the time after it); per arm: the wall (s, first send to last
byte of each rep, the reps summed); per arm and group: the verdict counts of each side, side by
side (a count is not a figure to take a percentage of, but a verdict that changes is the first
thing a what-if gets wrong).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from loadgen.analysis.compare import unlike_counts
from loadgen.analysis.registry import metric
from loadgen.codec import json_field
from loadgen.run_manifest import RunManifest

DEFAULT_TOLERANCE = 0.15

# (figure, the registered stream metric, the statistic of it over a group's streams)
GROUP_METRICS = (
    ("ttft_median_s", "ttft_s", "median"),
    ("ttft_p90_s", "ttft_s", "p90"),
    ("decode_median_tok_s", "decode_tok_s", "median"),
)


def is_fidelity(manifest: RunManifest) -> bool:
    return manifest.fidelity is not None


def error_of(measured: float | None, predicted: float | None) -> float | None:
    """predicted / measured - 1; None where either is missing or the measurement is 0."""
    if measured is None or predicted is None or measured == 0:
        return None
    return predicted / measured - 1


@dataclass(frozen=True, slots=True)
class FigureRow:
    """One figure of one arm and group: measured on the server, predicted on the virtual clock."""

    arm: str
    group: str
    metric: str
    label: str
    unit: str
    measured: float | None
    predicted: float | None
    tolerance: float = json_field(omit="always")  # the table's, written once beside the rows
    json_derived: ClassVar[tuple[str, ...]] = ("error", "within")

    @property
    def error(self) -> float | None:
        err = error_of(self.measured, self.predicted)
        return None if err is None else round(err, 4)

    @property
    def within(self) -> bool | None:
        err = error_of(self.measured, self.predicted)
        return None if err is None else abs(err) <= self.tolerance


@dataclass(frozen=True, slots=True)
class VerdictPair:
    """One arm and group's verdict counts on each side."""

    arm: str
    group: str
    real: Mapping[str, int]
    virtual: Mapping[str, int]

    @property
    def same(self) -> bool:
        return self.real == self.virtual


@dataclass(frozen=True, slots=True)
class Fidelity:
    tolerance: float
    rows: tuple[FigureRow, ...]
    verdicts: tuple[VerdictPair, ...]
    # Arms the real side ran and the virtual side did not predict: named, never dropped.
    unmatched: tuple[str, ...]
    # Groups whose figures stand on other counts of streams or of ok ones (a measured side
    # with HTTP 500s scored against a prediction of none): said, as compare says them.
    unlike: tuple[str, ...] = ()
    json_derived: ClassVar[tuple[str, ...]] = ("figures", "within", "verdicts_agree")

    @property
    def figures(self) -> int:
        """Figures with an error (both sides measured)."""
        return sum(1 for r in self.rows if r.within is not None)

    @property
    def within(self) -> int:
        return sum(1 for r in self.rows if r.within)

    @property
    def verdicts_agree(self) -> int:
        return sum(1 for v in self.verdicts if v.same)


def fidelity_table(
    real: Mapping[str, Mapping[str, Any]],
    virtual: Mapping[str, Mapping[str, Any]],
    tolerance: float = DEFAULT_TOLERANCE,
) -> Fidelity:
    """The comparison of two runs of one scenario, arm by arm (`real` and `virtual` map an arm's
    name to its summary.json; a run without arms is one arm named "-"). A launched server boots
    each arm more than once (arms/<arm>.boot<k>/) where the virtual clock needs one: each boot
    is compared with the one prediction, so the boots' spread shows beside the error."""
    rows: list[FigureRow] = []
    verdicts: list[VerdictPair] = []
    unmatched: list[str] = []
    unlike: list[str] = []
    for arm, measured in real.items():
        predicted = virtual.get(arm, virtual.get(_arm_of_boot(arm)))
        if predicted is None:
            unmatched.append(arm)
            continue
        for group, g in measured.get("groups", {}).items():
            p = predicted.get("groups", {}).get(group, {})
            for figure, field, stat in GROUP_METRICS:
                m, real_v, virtual_v = metric(field), _stat(g, field, stat), _stat(p, field, stat)
                rows.append(FigureRow(arm, group, figure, f"{m.label} {stat}", m.unit, real_v,
                                      virtual_v, tolerance))  # fmt: skip
            verdicts.append(VerdictPair(arm, group, dict(g.get("verdicts") or {}),
                                        dict(p.get("verdicts") or {})))  # fmt: skip
            if p:
                unlike += [f"arm {arm}: {line}" for line in
                           unlike_counts({group: (g, p)}, ("measured", "predicted"))]  # fmt: skip
        # The reps' walls summed: the gaps between reps are loadgen's scrapes, not the server's.
        real_wall, virtual_wall = (s.get("run", {}).get("reps_wall_s")
                                   for s in (measured, predicted))  # fmt: skip
        rows.append(FigureRow(arm, "-", "reps_wall_s", "wall (reps summed)", "s", real_wall,
                              virtual_wall, tolerance))  # fmt: skip
    return Fidelity(tolerance, tuple(rows), tuple(verdicts), tuple(unmatched), tuple(unlike))


def _stat(group: Mapping[str, Any], field: str, stat: str) -> Any:
    return (group.get(field) or {}).get(stat)


def _arm_of_boot(arm: str) -> str:
    """The arm a boot's run directory belongs to ("x=1.boot2" -> "x=1")."""
    head, dot, boot = arm.rpartition(".boot")
    return head if dot and boot.isdigit() else arm
