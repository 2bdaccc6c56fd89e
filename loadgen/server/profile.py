"""What a server profile is (how to start one kind of server) and the facts a launch reads back.

A profile turns (port, extra flags) into an argv and an environment, and names the flags that
state the server's limits. The launcher (launcher.py) owns processes; profiles own none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

from loadgen.server import installs
from loadgen.server.bootlog import parse_cache_config_info

FactSource = Literal["boot_log", "flags", "metrics", "server_info", "server_default"]

# (source, facts): one layer of merge_facts.
Layer = tuple[FactSource, Mapping[str, int]]
# A default flag of a profile: its spellings (the first is used) and the values it takes. The
# user's flags replace a default given under any of its spellings.
DefaultFlag = tuple[tuple[str, ...], tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class ServerFacts:
    """A launched server's limits; `sources[name]` says where each known fact came from.

    block_size: tokens per KV block (vLLM; None for llama.cpp, which has no blocks).
    num_gpu_blocks: blocks in the KV pool. kv_cache_tokens: tokens the KV pool holds.
    max_num_batched_tokens: token budget of one engine step (llama.cpp: n_batch).
    max_num_seqs: sequences running at once (llama.cpp: slots, -np).
    max_model_len: longest sequence one request may reach (llama.cpp: context per slot).
    notes: what the boot log says beyond limits (attention_backend, max_concurrency,
    kv_cache_device; llama.cpp: gpu_layers "33/33", gpu_devices, gpu_device, flash_attn).
    unknown: why a limit the profile expects to read stayed unknown, by fact name.
    """

    block_size: int | None = None
    num_gpu_blocks: int | None = None
    kv_cache_tokens: int | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    max_model_len: int | None = None
    sources: Mapping[str, FactSource] = field(default_factory=dict)
    notes: Mapping[str, str | int | float] = field(default_factory=dict)
    unknown: Mapping[str, str] = field(default_factory=dict)


def merge_facts(
    layers: Sequence[tuple[FactSource, Mapping[str, int]]],
    notes: Mapping[str, str | int | float] | None = None,
) -> ServerFacts:
    """Facts from several sources; for each fact the first layer that states it wins."""
    values: dict[str, int] = {}
    sources: dict[str, FactSource] = {}
    for source, facts in layers:
        for name, value in facts.items():
            if name not in values:
                values[name] = value
                sources[name] = source
    return ServerFacts(**values, sources=sources, notes=dict(notes or {}), unknown={})


def _names_option(token: str, spellings: Sequence[str]) -> bool:
    return any(token == s or token.startswith(s + "=") for s in spellings)


def merge_flags(defaults: Sequence[DefaultFlag], user: Sequence[str]) -> list[str]:
    """The defaults the user did not override, followed by the user's flags."""
    kept = [
        token
        for spellings, values in defaults
        if not any(_names_option(t, spellings) for t in user)
        for token in (spellings[0], *values)
    ]
    return [*kept, *user]


def flag_value(flags: Sequence[str], spellings: Sequence[str]) -> str | None:
    """The value of the last occurrence of an option (`--opt v` or `--opt=v`), else None."""
    found = None
    for i, token in enumerate(flags):
        for s in spellings:
            if token == s and i + 1 < len(flags):
                found = flags[i + 1]
            elif token.startswith(s + "="):
                found = token[len(s) + 1 :]
    return found


def int_flags(flags: Sequence[str], options: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """Facts stated by integer-valued flags: `options` maps a fact to the option's spellings."""
    facts = {}
    for fact, spellings in options.items():
        value = flag_value(flags, spellings)
        if value is not None and value.isdigit():
            facts[fact] = int(value)
    return facts


class Profile:
    """One kind of server. Subclasses fill in the class attributes and `argv`."""

    name: str = ""
    boot_timeout_s: float = 120.0
    # Traits of the kind. A deterministic server gives equal boots, so one boot per arm is its
    # floor; a real one's boot-to-boot noise needs two at least to read an effect against.
    deterministic: bool = False
    default_boots_per_arm: int = 2
    # The model name it serves when the launch names none (None: the model's own name).
    default_served_name: str | None = None
    # Configured by the scenario's `sim:` block rather than by the arm's server flags, and
    # its facts are its own settings (labelled with its kind, not "flags" or "boot_log").
    configured_by_sim_block: bool = False
    # Variables the scenario's `server.env` adds over the profile's own (`env`).
    extra_env: tuple[tuple[str, str], ...] = ()
    # Whether /metrics carries `vllm:cache_config_info` worth reading after boot.
    reads_cache_config_metric: bool = False
    default_flags: tuple[DefaultFlag, ...] = ()
    # The prefix of the flags that turn speculative decoding on (None: loadgen knows none for
    # the kind); a launch with none of them drafts nothing.
    draft_flag_prefix: str | None = None
    # Fact name -> spellings of the flag that sets it.
    fact_flags: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    # A swept boolean's own spelling: name -> (argv when true, argv when false).
    bool_flags: ClassVar[Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]]] = {}

    def default_model(self) -> Path | None:
        """The model served when the launch names none; None: the launch must name one (a
        real server has no model of its own to pick)."""
        return None

    def default_boot_timeout_s(self) -> float:
        """How long a boot may take when neither the scenario nor the caller says."""
        return self.boot_timeout_s

    def argv(self, *, port: int, model: Path, served_name: str, flags: Sequence[str]) -> list[str]:
        raise NotImplementedError

    def queried_facts(self, get: Callable[[str], tuple[int, str]]) -> list[Layer]:
        """Facts the running server answers for (`get(path)` -> (status, body)), in order of
        trust: vLLM's cache_config_info metric, SGLang's /server_info."""
        if not self.reads_cache_config_metric:
            return []
        status, body = get("/metrics")
        return [("metrics", parse_cache_config_info(body) if status == 200 else {})]

    def default_facts(self, facts: ServerFacts, flags: Sequence[str]) -> dict[str, int]:
        """Limits the launched server took from its own defaults without saying so, derived
        from what it did say (`facts`) and the `flags` it was given (none by default)."""
        return {}

    def unknown_reasons(self, facts: ServerFacts) -> dict[str, str]:
        """Why limits this kind's boot may leave unread are unknown (none by default)."""
        return {}

    def env(self, state_dir: Path) -> dict[str, str]:
        """Variables added to the environment; `state_dir` is the profile's writable folder."""
        return {}

    def effective_flags(self, user: Sequence[str]) -> list[str]:
        return merge_flags(self.default_flags, user)

    def flag_facts(self, flags: Sequence[str]) -> dict[str, int]:
        return int_flags(flags, self.fact_flags)


class InstalledProfile(Profile):
    """A server installed under a Python (vLLM, SGLang): the install named with
    --server-python / --server-bin, else found by `find_install`, on first use (raises
    installs.InstallNotFound)."""

    def __init__(self, python: Path | None = None, bin: Path | None = None) -> None:
        self._python = python
        self._bin = bin
        self._install: installs.PythonInstall | None = None

    @property
    def install(self) -> installs.PythonInstall:
        if self._install is None:
            self._install, _ = self.find_install(self._python, self._bin)
        return self._install

    def find_install(
        self, python: Path | None, bin: Path | None
    ) -> tuple[installs.PythonInstall, str]:
        raise NotImplementedError
