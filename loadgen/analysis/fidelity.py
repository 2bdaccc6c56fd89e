"""The fidelity of a calibrated sim: one scenario measured on a real server and predicted on the
virtual clock with the profile fitted to it, figure by figure, with the signed error
(predicted / measured - 1) and whether it lies within the tolerance.

Per arm and group: TTFT median and p90 (s) and the decode-only rate median (tok/s, usage
tokens after the first chunk over the time after it); per arm: the wall (s, first send to last
byte); per arm and group: the verdict counts of each side, side by side (a count is not a
figure to take a percentage of, but a verdict that changes is the first thing a what-if gets
wrong).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loadgen.analysis.registry import metric

DEFAULT_TOLERANCE = 0.15

# (figure, the registered stream metric, the statistic of it over a group's streams)
GROUP_METRICS = (
    ("ttft_median_s", "ttft_s", "median"),
    ("ttft_p90_s", "ttft_s", "p90"),
    ("decode_median_tok_s", "decode_tok_s", "median"),
)


def is_fidelity(manifest: Mapping[str, Any]) -> bool:
    return isinstance(manifest.get("fidelity"), dict)


def error_of(measured: float | None, predicted: float | None) -> float | None:
    """predicted / measured - 1; None where either is missing or the measurement is 0."""
    if measured is None or predicted is None or measured == 0:
        return None
    return predicted / measured - 1


def _row(arm: str, group: str, metric: str, label: str, unit: str, measured: Any,
         predicted: Any, tolerance: float) -> dict[str, Any]:  # fmt: skip
    err = error_of(measured, predicted)
    return {
        "arm": arm, "group": group, "metric": metric, "label": label, "unit": unit,
        "measured": measured, "predicted": predicted,
        "error": None if err is None else round(err, 4),
        "within": None if err is None else abs(err) <= tolerance,
    }  # fmt: skip


def fidelity_table(
    real: Mapping[str, Mapping[str, Any]],
    virtual: Mapping[str, Mapping[str, Any]],
    tolerance: float = DEFAULT_TOLERANCE,
) -> dict[str, Any]:
    """The comparison of two runs of one scenario, arm by arm (`real` and `virtual` map an arm's
    name to its summary.json; a run without arms is one arm named "-"). A launched server boots
    each arm more than once (arms/<arm>.boot<k>/) where the virtual clock needs one: each boot
    is compared with the one prediction, so the boots' spread shows beside the error."""
    rows: list[dict[str, Any]] = []
    verdicts: list[dict[str, Any]] = []
    unmatched: list[str] = []
    for arm, measured in real.items():
        predicted = virtual.get(arm, virtual.get(_arm_of_boot(arm)))
        if predicted is None:
            unmatched.append(arm)
            continue
        for group, g in measured.get("groups", {}).items():
            p = predicted.get("groups", {}).get(group, {})
            for figure, field, stat in GROUP_METRICS:
                m, real_v, virtual_v = metric(field), _stat(g, field, stat), _stat(p, field, stat)
                label = f"{m.label} {stat}"
                rows.append(_row(arm, group, figure, label, m.unit, real_v, virtual_v, tolerance))
            verdicts.append({"arm": arm, "group": group, "real": dict(g.get("verdicts") or {}),
                             "virtual": dict(p.get("verdicts") or {})})  # fmt: skip
        rows.append(_row(arm, "-", "wall_s", "wall", "s", measured.get("run", {}).get("wall_s"),
                         predicted.get("run", {}).get("wall_s"), tolerance))  # fmt: skip
    judged = [r for r in rows if r["within"] is not None]
    return {
        "tolerance": tolerance,
        "rows": rows,
        "verdicts": verdicts,
        "figures": len(judged),
        "within": sum(1 for r in judged if r["within"]),
        "verdicts_agree": sum(1 for v in verdicts if v["real"] == v["virtual"]),
        "unmatched": unmatched,
    }


def _stat(group: Mapping[str, Any], field: str, stat: str) -> Any:
    return (group.get(field) or {}).get(stat)


def _arm_of_boot(arm: str) -> str:
    """The arm a boot's run directory belongs to ("x=1.boot2" -> "x=1")."""
    head, dot, boot = arm.rpartition(".boot")
    return head if dot and boot.isdigit() else arm
