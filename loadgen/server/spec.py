"""Which server a run launches, and how a sweep's flags become that server's command line.

`loadgen run --server vllm|sglang|llama.cpp|sim` (with `--server-arg`, `--model-path` or
`--model`, `--server-python` / `--server-bin`) names a ServerSpec. A sweep's server flags are
written the way vLLM names them (`max_num_batched_tokens`) and become
`--max-num-batched-tokens 512`, or the profile's own spelling where it states that fact
(llama.cpp: `max_num_seqs` -> `-np`; SGLang: `--max-running-requests`, and
`enable_prefix_caching: false` -> `--disable-radix-cache`); a sweep key that starts with `-`
is a literal flag of the server (`-ub`, `--ubatch-size`) passed as written.
"""

from __future__ import annotations

import copy
import re
import shutil
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.server.kinds import SERVER_KINDS as SERVER_KINDS
from loadgen.server.kinds import kind_profile
from loadgen.server.launcher import ServerBootError
from loadgen.server.profile import Profile
from loadgen.server.sim import sim_flags


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """A server to launch: its kind, base flags (before any swept ones), model and environment
    added to the profile's own."""

    kind: str
    args: tuple[str, ...] = ()
    model_path: Path | None = None
    env: tuple[tuple[str, str], ...] = ()
    command: tuple[str, ...] = ()  # kind "command": the argv template
    served_name: str | None = None
    model_name: str | None = None  # a model the server finds by name (no model_path)
    python: Path | None = None  # the interpreter with the server installed
    bin: Path | None = None  # the server's executable
    boot_timeout_s: float | None = None  # None: the profile's default for its build


class CommandProfile(Profile):
    """Any server, from an argv template: `{port}`, `{model}`, `{served_name}` and the boot's
    swept flags by name are substituted; swept flags the template does not name are appended
    (flag_args)."""

    name = "command"

    def __init__(self, template: Sequence[str], values: Mapping[str, Any]) -> None:
        self.template = tuple(template)
        self.values = dict(values)

    def references(self, name: str) -> bool:
        return any(
            field == name
            for token in self.template
            for _, field, _, _ in string.Formatter().parse(token)
        )

    def default_model(self) -> Path:
        # No model of its own: the launcher checks a path exists, and the executable does
        # (a missing one used to read "model ... does not exist (make setup-real)").
        found = shutil.which(self.template[0])
        if found is None:
            raise ServerBootError(
                f"server command: executable {self.template[0]!r} not found (not a file, "
                "nor on PATH); fix server.command[0] in the scenario"
            )
        return Path(found)

    def argv(self, *, port: int, model: Path, served_name: str, flags: Sequence[str]) -> list[str]:
        fields = {**self.values, "port": port, "model": model, "served_name": served_name}
        return [token.format(**fields) for token in self.template] + list(flags)


def profile_for(spec: ServerSpec, values: Mapping[str, Any] | None = None) -> Profile:
    """The profile that starts the spec's server; `values` are the boot's swept flags (a
    command template substitutes them)."""
    if spec.kind == "command":
        base: Profile = CommandProfile(spec.command, values or {})
    else:
        base = kind_profile(spec.kind, spec.python, spec.bin)
    if spec.env:
        base = copy.copy(base)  # the kind's own profile stays as it is
        base.extra_env = spec.env
    return base


def flag_args(profile: Profile, flags: Mapping[str, Any]) -> list[str]:
    """A sweep arm's server flags as the profile's command-line options."""
    out: list[str] = []
    if isinstance(profile, CommandProfile):
        flags = {k: v for k, v in flags.items() if not profile.references(k)}
    for name, value in flags.items():
        if name.startswith("-"):
            out += [name] if value is True else [name, str(value)]
        elif name in profile.bool_flags and isinstance(value, bool):
            out += list(profile.bool_flags[name][0 if value else 1])
        elif name in profile.fact_flags and not isinstance(value, bool):
            out += [profile.fact_flags[name][0], str(value)]
        else:
            out += sim_flags({name: value})
    return out


_OPTION = re.compile(r"--?[A-Za-z]")


def launch_flags(base: Sequence[str], swept: Sequence[str]) -> list[str]:
    """A boot's flags: the base ones (--server-arg) less any option a swept flag sets again,
    then the swept ones. Servers take the last of a repeated option, so the boot is the same;
    the command line, run.json and a profile's fitted_boots name one value per option (a
    calibration boot at budget 512 listed --max-num-batched-tokens=2048 before it)."""
    names = {f.split("=", 1)[0] for f in swept if _OPTION.match(f)}
    out: list[str] = []
    dropping_value = False
    for token in base:
        is_option = _OPTION.match(token) is not None
        if dropping_value and not is_option:
            dropping_value = False
            continue
        dropping_value = False
        if is_option and token.split("=", 1)[0] in names:
            dropping_value = "=" not in token
            continue
        out.append(token)
    return out + list(swept)
