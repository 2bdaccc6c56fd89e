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
    measurements: [...]     # one row per probe: measured, predicted, error
    fitted_boots: [...]     # each boot the probes ran on: {flags, max_num_batched_tokens,
                            # max_num_seqs, mode (eager | graph | null), costs it measured}
    unseparated: [...]      # costs the probes could not tell apart (by URL, one boot:
                            # fixed_s and per_token_s); a flag that moves one is not predicted

`facts` are sim settings under loadgen/simoptions.py's names; `costs` are StepProfile's fields
(sim/profiles.py) plus the engine's request_overhead_s. Anywhere a sim profile is named (`loadgen
sim --profile`, a scenario's `sim.profile`, `--sim-profile`), a path to such a file may stand
instead of a built-in name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

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
class FittedProfile:
    """One profile file's content."""

    name: str
    step: StepProfile
    request_overhead_s: float
    facts: Mapping[str, Any]
    fitted_on: Mapping[str, Any] = field(default_factory=dict)
    sources: Mapping[str, Any] = field(default_factory=dict)
    fit: Mapping[str, Any] = field(default_factory=dict)
    measurements: tuple[Mapping[str, Any], ...] = ()
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
        "measurements": [dict(m) for m in p.measurements],
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
        measurements=tuple(doc.get("measurements") or ()),
        fitted_boots=tuple(doc.get("fitted_boots") or ()),
        unseparated=_unseparated(path, doc.get("unseparated") or []),
    )


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
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
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
