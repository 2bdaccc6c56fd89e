"""`--until-precise`: the stop that ends a run's sending once every target percentile's
confidence interval is within its margin (analysis/precision.py). It sees each record as it
is written, on either clock, and is asked before each send, as a soak's stop is; the plan's
requests bound it (a target never reached ends with the plan, and says so)."""

from __future__ import annotations

from loadgen.analysis.precision import PrecisionTarget, PrecisionTracker
from loadgen.records import StreamRecord
from loadgen.run_manifest import UntilPrecise


class PreciseStop:
    def __init__(self, targets: tuple[PrecisionTarget, ...], planned: int | None) -> None:
        self._tracker = PrecisionTracker(targets)
        self._planned = planned
        self._measured = 0
        self._at_stop: UntilPrecise | None = None

    def see(self, rec: StreamRecord) -> None:
        if rec.phase != "measure" or self._at_stop is not None:
            return
        self._measured += 1
        self._tracker.see(rec)
        if self._tracker.reached:
            self._at_stop = self._standing(reached=True)

    def stopped(self) -> bool:
        return self._at_stop is not None

    def result(self) -> UntilPrecise:
        """Where the targets stood when they were reached, or at the end of the plan."""
        return self._at_stop or self._standing(reached=False)

    def _standing(self, *, reached: bool) -> UntilPrecise:
        return UntilPrecise(reached, self._measured, self._planned, tuple(self._tracker.standing))
