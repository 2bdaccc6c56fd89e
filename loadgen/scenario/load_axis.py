"""A scenario's load as one knob: closed-loop concurrency, open-loop rate, or one group's count.

`loadgen run --concurrency 1,2,4` / `--rate 1,2,inf` and `loadgen capacity --over ...` turn a
scenario into one arm per load value, each arm the scenario with only its arrival (or one
group's count) changed, so every arm sends the same prompts, shapes and output lengths:
- concurrency N: a closed loop with N seats (`vllm bench serve --max-concurrency`);
- rate R: Poisson arrivals at R requests/s (a gamma arrival keeps its burstiness), N of them
  scaled so the last comes at N / R, as vllm bench serve schedules a rate (the rate sent is
  the label, whatever the seed); `inf` sends every request at once (a closed loop with as
  many seats as requests);
- `group` G: G's count is the load (its streams are its users), under the scenario's own
  `together` or `staggered` arrival, so a whale in another group stays one whale.
How many requests an arm sends: the arrival's own `count` or `duration_s` where it gives one,
`requests` where the user gives it, else one pass over the groups and at least MIN_REQUESTS,
PER_SEAT per seat (concurrency) or RATE_SECONDS of arrivals (rate), so a seat is refilled
several times and a rate's queue has time to build.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from loadgen.scenario.model import (
    OPEN_LOOP_START_KINDS,
    Closed,
    Gamma,
    Poisson,
    Scenario,
    Sweep,
    SweepArm,
    Trace,
)

LOAD_AXES = ("concurrency", "rate")
MIN_REQUESTS = 32
PER_SEAT = 4
RATE_SECONDS = 10.0
INF = math.inf


@dataclass(frozen=True, slots=True)
class LoadAxis:
    """What a load value sets: `over` concurrency or rate; `group` names the one group whose
    count is the load; `requests` fixes each arm's request count; `cap` the streams in flight
    of every rate's open loop (vllm bench serve's --max-concurrency), else the arrival's own."""

    over: str
    group: str | None = None
    requests: int | None = None
    cap: int | None = None

    @property
    def name(self) -> str:
        """The arm-name key: `concurrency`, `rate` or `groups.<G>.count`."""
        return self.over if self.group is None else f"groups.{self.group}.count"

    def label(self, value: float) -> str:
        return f"{self.name}={format_load(value)}"


def format_load(value: float) -> str:
    """A load value as arm names and tables print it: 4, 2.5, inf."""
    if math.isinf(value):
        return "inf"
    return str(int(value)) if float(value).is_integer() else f"{value:.4g}"


def parse_load_values(text: str, over: str) -> tuple[float, ...]:
    """`1,2,4,8` (concurrency: whole numbers >= 1) or `0.5,1,inf` (rate: > 0, inf allowed);
    ValueError with a one-line message naming the flag otherwise."""
    flag = f"--{over}"
    values: list[float] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        values.append(_load_value(part, over, f"{flag} {text!r}"))
    if not values:
        raise ValueError(f"{flag} {text!r}: no value (expected e.g. {flag} 1,2,4)")
    if len(set(values)) != len(values):
        raise ValueError(f"{flag} {text!r}: a value is given twice (expected each once)")
    return tuple(values)


def _load_value(part: str, over: str, where: str) -> float:
    if over == "rate" and part.lower() == "inf":
        return INF
    try:
        value = float(part)
    except ValueError:
        raise ValueError(f"{where}: {part!r} is not a number") from None
    if over == "concurrency" and (not value.is_integer() or value < 1):
        raise ValueError(f"{where}: {part!r} (expected whole numbers >= 1)")
    if over == "rate" and not 0 < value < INF:
        raise ValueError(f"{where}: {part!r} (expected requests/s > 0, or inf)")
    return int(value) if over == "concurrency" else value


# Only capacity offers --group: a hint from run's or tune's load axis must name that command.
GROUP_LOAD_FIX = "loadgen capacity --group NAME makes one group's count the load"


def load_problem(scenario: Scenario, axis: LoadAxis) -> str | None:
    """Why `scenario` cannot take this load knob, one line naming the field and the fix."""
    where = f"{scenario.source or scenario.name}"
    a = scenario.arrival
    if scenario.sweep is not None:
        swept = ", ".join(k for k, _ in scenario.sweep.axes)
        return (
            f"{where}: sweep: the scenario already sweeps {swept}; --{axis.over} makes its "
            "own arms (drop the sweep block or the flag)"
        )
    if axis.group is not None:
        if axis.over != "concurrency":
            return (
                f"--group {axis.group}: a group's count is a concurrency (use --over concurrency)"
            )
        if axis.group not in {g.name for g in scenario.groups}:
            names = ", ".join(g.name for g in scenario.groups)
            return f"{where}: groups: no group {axis.group!r} (expected one of {names})"
        if a.kind not in OPEN_LOOP_START_KINDS:
            return (
                f"{where}: arrival: {a.kind} draws one sequence from all groups, so a group's "
                "count is its weight, not its users (use together or staggered with --group)"
            )
        return None
    if isinstance(a, Trace):
        return (
            f"{where}: arrival: a trace sets its own arrivals (use its time_scale to change "
            f"the load, or a scenario without a trace for --{axis.over})"
        )
    started = [g for g in scenario.groups if g.start_s]
    if started:
        g = started[0]
        return (
            f"{where}: groups.{g.name}.start: {g.start_s:g} s needs a together or staggered "
            f"arrival, and --{axis.over} draws one sequence from all groups (drop the start: "
            f"--set groups.{g.name}.start=0; or {GROUP_LOAD_FIX})"
        )
    if any(g.session is not None or g.replays_turns for g in scenario.groups):
        return (
            f"{where}: groups: sessions run under together or staggered arrivals only "
            f"({GROUP_LOAD_FIX})"
        )
    return None


def with_load(scenario: Scenario, axis: LoadAxis, value: float) -> Scenario:
    """`scenario` at one load value (load_problem must have returned None)."""
    if axis.group is not None:
        groups = tuple(
            dataclasses.replace(g, count=int(value)) if g.name == axis.group else g
            for g in scenario.groups
        )
        return dataclasses.replace(scenario, groups=groups)
    a = scenario.arrival
    own_count = a.count if isinstance(a, Closed | Poisson | Gamma) else None
    own_duration = a.duration_s if isinstance(a, Closed | Poisson | Gamma) else None
    # An open loop's seat cap stays on every rate (vllm bench's --max-concurrency beside
    # --request-rate); at rate inf it is the closed loop's seats.
    cap = axis.cap or (a.concurrency if isinstance(a, Poisson | Gamma) else None)
    if axis.over == "concurrency":
        count = _count(scenario, axis, own_count, own_duration, PER_SEAT * value)
        arrival: Closed | Poisson | Gamma = Closed(int(value), count, own_duration)
    elif math.isinf(value):
        count = _count(scenario, axis, own_count, None, 0) or MIN_REQUESTS
        arrival = Closed(cap or count, count)
    else:
        count = _count(scenario, axis, own_count, own_duration, RATE_SECONDS * value)
        # A counted rate is sent at its label: 40 drawn gaps at 16/s spanned 3.26 s (12/s), and
        # capacity named 16 req/s for a server that completes 11.35.
        exact = count is not None and own_duration is None
        if isinstance(a, Gamma):
            arrival = dataclasses.replace(a, rate_per_s=value, count=count, concurrency=cap,
                                          ramp=None, exact_span=exact)  # fmt: skip
        else:
            arrival = Poisson(value, count, own_duration, cap, exact_span=exact)
    return dataclasses.replace(scenario, arrival=arrival)


def _count(
    s: Scenario, axis: LoadAxis, own: int | None, duration: float | None, scaled: float
) -> int | None:
    if axis.requests is not None:
        return axis.requests
    if own is not None or duration is not None:
        return own
    one_pass = sum(g.count for g in s.groups)
    return max(one_pass, MIN_REQUESTS, math.ceil(scaled))


def load_sweep(scenario: Scenario, axis: LoadAxis, values: tuple[float, ...]) -> Sweep:
    """One client-side arm per load value, all on one server boot."""
    arms = tuple(
        SweepArm(axis.label(v), {}, {axis.name: _json_value(v)}, with_load(scenario, axis, v))
        for v in values
    )
    return Sweep(((axis.name, tuple(_json_value(v) for v in values)),), arms, boots_per_arm=1)


def _json_value(value: float) -> float | int | str:
    """JSON has no infinity: `inf` is kept as the string the flag took."""
    return "inf" if math.isinf(value) else value
