"""A fitted sim profile on disk: the step costs `loadgen calibrate` measured on one server, the
server's limits the sim must mirror, what it was fitted on, and the measurements with their
residuals, so a what-if on the virtual clock carries its own error bar.

    loadgen_sim_profile: 1
    name: vllm-cpu-tiny
    fitted_on: {server: vllm, model: ..., flags: [...], hardware: ..., date: ...}
    facts: {max_num_seqs: 4, max_num_batched_tokens: 512, block_size: 32, ...}
    costs: {fixed_s: ..., per_token_s: ..., decode_token_s: ..., decode_ctx_s: ...,
            prefill_ctx_s: ..., cached_token_s: ..., request_overhead_s: ...}
    sources: {...}          # where each figure came from (server counters or client timing)
    fit: {...}              # method, error summary
    measurements: [...]     # one row per point: measured, predicted, error
    fitted_boots: [...]     # each boot the points ran on: {flags, max_num_batched_tokens,
                            # max_num_seqs, mode (eager | graph | null), costs it measured}
    unseparated: [...]      # costs the points could not tell apart (by URL, one boot:
                            # fixed_s and per_token_s); a flag that moves one is not predicted

`facts` are sim settings under loadgen/simoptions.py's names; `costs` are StepProfile's fields
(sim/profiles.py) plus the engine's request_overhead_s. Anywhere a sim profile is named (`loadgen
sim --profile`, a scenario's `sim.profile`, `--sim-profile`), a path to such a file may stand
instead of a built-in name.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from loadgen.codec import CodecError, from_json, json_field, json_meta, to_json
from loadgen.sim.profiles import SIM_PROFILES, StepProfile, sim_profile
from loadgen.simoptions import SIM_OPTION_NAMES

FORMAT_KEY = "loadgen_sim_profile"
FORMAT_VERSION = 1
STEP_COSTS = ("fixed_s", "per_token_s", "decode_token_s", "decode_ctx_s", "prefill_ctx_s",
              "cached_token_s", "min_step_s")  # fmt: skip
COSTS = (*STEP_COSTS, "request_overhead_s")
# Costs a file may leave out: decode tokens then cost what prefill tokens do; no overhead.
OPTIONAL_COSTS = ("decode_token_s", "request_overhead_s", "cached_token_s", "min_step_s")


class ProfileFileError(ValueError):
    """A profile file that cannot be used; the message is one line naming file, field and fix."""


@dataclass(frozen=True, slots=True)
class FitRow:
    """One row of `measurements`: a calibration point's measured time beside the fitted sim's
    prediction (s) and the signed relative error (predicted / measured - 1); `basis` is what
    the point sent and the server reported (analysis/calibration.py's Measurement.basis)."""

    # `probe` in a profile written before calibration's points had their own name
    point: str = field(metadata=json_meta(legacy=("probe",)))
    kind: str
    samples: int
    measured_s: float
    predicted_s: float
    error: float
    basis: Mapping[str, Any] = json_field(rest=True)


@dataclass(frozen=True, slots=True)
class FittedProfile:
    """One profile file's content."""

    name: str
    step: StepProfile
    request_overhead_s: float
    facts: Mapping[str, Any]
    fitted_on: Mapping[str, Any] = field(default_factory=dict)
    sources: Mapping[str, Any] = field(default_factory=dict)
    fit: Mapping[str, Any] = field(default_factory=dict)
    measurements: tuple[FitRow, ...] = ()
    fitted_boots: tuple[Mapping[str, Any], ...] = ()
    unseparated: tuple[str, ...] = ()

    def costs(self) -> dict[str, float | None]:
        step = {name: getattr(self.step, name) for name in STEP_COSTS}
        return step | {"request_overhead_s": self.request_overhead_s}

    def settings(self, path: Path) -> dict[str, Any]:
        """The sim settings that boot this profile: its facts, its overhead, and the file."""
        return {
            **self.facts,
            "request_overhead_s": self.request_overhead_s,
            "profile": str(path),
        }


def is_profile_path(ref: str) -> bool:
    """A profile reference that names a file rather than a built-in profile."""
    return ref not in SIM_PROFILES and (ref.endswith((".yaml", ".yml")) or "/" in ref)


def profile_document(p: FittedProfile) -> dict[str, Any]:
    """The YAML document of `p`, in the module docstring's order."""
    return {
        FORMAT_KEY: FORMAT_VERSION,
        "name": p.name,
        "fitted_on": dict(p.fitted_on),
        "facts": dict(p.facts),
        "costs": p.costs(),
        "sources": dict(p.sources),
        "fit": dict(p.fit),
        "measurements": [to_json(m) for m in p.measurements],
        "fitted_boots": [dict(b) for b in p.fitted_boots],
        "unseparated": list(p.unseparated),
    }


def write_profile_file(path: Path, p: FittedProfile) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(profile_document(p), sort_keys=False, width=100)
    path.write_text(text, encoding="utf-8")


def load_profile_file(path: Path) -> FittedProfile:
    """The profile in `path`; ProfileFileError (one line) for a missing or malformed file."""
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ProfileFileError(f"{path}: cannot read the sim profile: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise ProfileFileError(
            f"{path}: not UTF-8 text; write it with `loadgen calibrate`"
        ) from None
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        line = f":{where.line + 1}" if where is not None else ""
        raise ProfileFileError(
            f"{path}{line}: not YAML; write it with `loadgen calibrate`"
        ) from None
    if not isinstance(doc, dict) or doc.get(FORMAT_KEY) != FORMAT_VERSION:
        raise ProfileFileError(
            f"{path}: not a sim profile ({FORMAT_KEY}: {FORMAT_VERSION} missing); "
            "write one with `loadgen calibrate`"
        )
    costs = _costs(path, doc.get("costs"))
    facts = _facts(path, doc.get("facts", {}))
    name = str(doc.get("name") or path.stem)
    # _costs refused a file without the step costs: those are floats here, never None.
    given = {n: v for n, v in costs.items() if v is not None}
    step = StepProfile(
        name,
        fixed_s=given["fixed_s"],
        per_token_s=given["per_token_s"],
        decode_ctx_s=given["decode_ctx_s"],
        prefill_ctx_s=given["prefill_ctx_s"],
        cached_token_s=costs.get("cached_token_s") or 0.0,
        decode_token_s=costs.get("decode_token_s"),
        min_step_s=costs.get("min_step_s"),
    )
    return FittedProfile(
        name=name,
        step=step,
        request_overhead_s=costs.get("request_overhead_s") or 0.0,
        facts=facts,
        fitted_on=_mapping(path, doc, "fitted_on"),
        sources=_mapping(path, doc, "sources"),
        fit=_mapping(path, doc, "fit"),
        measurements=_measurements(path, doc.get("measurements") or []),
        fitted_boots=tuple(doc.get("fitted_boots") or ()),
        unseparated=_unseparated(path, doc.get("unseparated") or []),
    )


def _measurements(path: Path, raw: Any) -> tuple[FitRow, ...]:
    try:
        return from_json(tuple[FitRow, ...], raw)
    except CodecError as exc:
        raise ProfileFileError(
            f"{path}: measurements{'.' if exc.path else ''}{'.'.join(exc.path)}: {exc.what}; "
            "refit the calibration with `loadgen calibrate --refit DIR`"
        ) from None


def _unseparated(path: Path, raw: Any) -> tuple[str, ...]:
    if not isinstance(raw, list) or any(c not in COSTS for c in raw):
        raise ProfileFileError(
            f"{path}: unseparated: expected a list of cost names ({', '.join(COSTS)}); "
            "refit the calibration with `loadgen calibrate --refit DIR`"
        )
    return tuple(raw)


def _mapping(path: Path, doc: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = doc.get(key) or {}
    if not isinstance(value, dict):
        raise ProfileFileError(f"{path}: {key}: expected a mapping, got {type(value).__name__}")
    return value


def _costs(path: Path, raw: Any) -> dict[str, float | None]:
    if not isinstance(raw, dict):
        raise ProfileFileError(f"{path}: costs: missing; a profile needs {', '.join(STEP_COSTS)}")
    unknown = sorted(set(raw) - set(COSTS))
    if unknown:
        raise ProfileFileError(
            f"{path}: costs.{unknown[0]}: unknown cost; valid: {', '.join(COSTS)}"
        )
    out: dict[str, float | None] = {}
    for name in COSTS:
        value = raw.get(name)
        if value is None and name in OPTIONAL_COSTS:
            out[name] = None
            continue
        # NaN and inf pass `< 0` and crashed the sim's first step with a traceback.
        if (isinstance(value, bool) or not isinstance(value, int | float)
                or not math.isfinite(value) or value < 0):  # fmt: skip
            raise ProfileFileError(f"{path}: costs.{name}: expected seconds >= 0, got {value!r}")
        out[name] = float(value)
    return out


def _facts(path: Path, raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ProfileFileError(f"{path}: facts: expected a mapping of sim settings")
    for name, value in raw.items():
        option = SIM_OPTION_NAMES.get(name)
        if option is None or not option.sim_block:
            raise ProfileFileError(
                f"{path}: facts.{name}: not a sim setting a profile can carry; drop it"
            )
        if option.kind is bool:
            ok = isinstance(value, bool)
        elif option.kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = isinstance(value, int | float) and not isinstance(value, bool)
        lo, hi = option.lo, option.hi
        if ok and not isinstance(value, bool):
            ok = (lo is None or value >= lo) and (hi is None or value <= hi)
        if not ok:
            raise ProfileFileError(
                f"{path}: facts.{name}: {value!r} is not a valid {option.kind.__name__}"
                + ("" if lo is None and hi is None else f" in [{lo}, {hi}]")
            )
    return dict(raw)


def resolve_step_profile(ref: str, base: Path | None = None) -> tuple[StepProfile, float | None]:
    """A built-in profile by name, or a profile file by path (relative to `base` when given),
    with the file's request overhead (None for a built-in: the engine's own setting stands)."""
    if not is_profile_path(ref):
        return sim_profile(ref), None
    path = Path(ref)
    if base is not None and not path.is_absolute():
        path = base / path
    fitted = load_profile_file(path)
    return fitted.step, fitted.request_overhead_s


# The costs a flag's effect rests on: moving the flag moves the work the sim schedules onto these
# terms, so the profile predicts it only where they were measured apart. The budget sets how a
# prompt is chunked (steps vs tokens); the seats set the decode batch; the cache sets what a hit
# restores. A flag absent here changes scheduling alone (pool, block size), which the sim models
# as vLLM does, whatever the costs.
FLAG_COSTS = {
    "max_num_batched_tokens": ("fixed_s", "per_token_s"),
    "long_prefill_token_threshold": ("fixed_s", "per_token_s"),
    "max_num_seqs": ("decode_token_s", "decode_ctx_s"),
    "enable_prefix_caching": ("cached_token_s",),
}
# Flags whose effect is the server's own behaviour, not a cost: the profile records the
# acceptance it saw at the server's setting and nothing about another.
UNMODELLED = ("num_speculative_tokens", "acceptance_rate")


def unpredictable(profile: FittedProfile | StepProfile, flag: str) -> str | None:
    """None when `profile` can predict the sim at other values of `flag`; else one line naming
    the flag and how to calibrate for it. A built-in profile (not fitted) is the sim itself and
    predicts every sim flag."""
    option = SIM_OPTION_NAMES.get(flag)
    if option is None or not option.sweep:
        return f"{flag}: not a sim flag a profile can predict (sweepable sim flags only)"
    if isinstance(profile, StepProfile):
        return None
    how = f"calibrate with the server launched (--server KIND) across {flag} values"
    if flag in UNMODELLED:
        return f"{flag}: the profile holds what the server did at its own setting; {how}"
    costs = FLAG_COSTS.get(flag)
    if costs is None or _model_is_the_servers(profile):
        return None
    # A calibration lists at least the boot it ran on: none listed is a profile from before
    # calibration recorded its boots (and what they left unseparated).
    if not profile.fitted_boots:
        return _without_record(profile, flag, costs, how)
    mixed = [c for c in costs if c in profile.unseparated]
    if mixed:
        return f"{flag}: the profile could not separate {', '.join(mixed)}; {how}"
    # Both flags move how a prompt is chunked, which the costs price only where the boots ran
    # at two budgets (each boot records the budget it stated, beside its command-line flags).
    budgets = {str(b.get("max_num_batched_tokens")) for b in profile.fitted_boots}
    if flag in ("max_num_batched_tokens", "long_prefill_token_threshold") and len(budgets) < 2:
        return (
            f"{flag}: the profile was fitted at one max_num_batched_tokens "
            f"({', '.join(sorted(budgets))}); {how}"
        )
    return None


def _model_is_the_servers(profile: FittedProfile) -> bool:
    """Fitted on loadgen's own sim: its step time is this very linear model, so costs fitted
    at one setting hold at every other (over HTTP the fit's residuals are the HTTP path's, 11%
    on the 32-token point, and do not move with a flag)."""
    return profile.fitted_on.get("server") == "sim"


def _without_record(
    profile: FittedProfile, flag: str, costs: tuple[str, ...], how: str
) -> str | None:
    """A profile that does not say which boots its costs came from: read conservatively. A
    calibration by URL or one launch measures one budget, where per-step and per-token costs
    move together; decode batches and cached prefixes are measured on any one boot, so the
    points they came from are what the profile must show."""
    if flag in ("max_num_batched_tokens", "long_prefill_token_threshold"):
        at = profile.facts.get("max_num_batched_tokens")
        return (
            f"{flag}: the profile does not record which boots it was fitted on (read as one "
            f"boot at max_num_batched_tokens={at}: per-step and per-token costs not separated); "
            f"{how}"
        )
    points = [m.point for m in profile.measurements]
    prefix = "decode-b" if "decode_token_s" in costs else "cached-"
    if sum(p.startswith(prefix) for p in points) >= (2 if prefix == "decode-b" else 1):
        return None
    return f"{flag}: the profile has no {prefix}* points to price {', '.join(costs)}; {how}"
