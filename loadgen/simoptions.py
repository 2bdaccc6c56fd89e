"""The built-in sim's settings, each declared once: its name, type, bounds, owner, help, flag.

Every face of the sim reads this table: `loadgen sim`'s click options (commands/sim.py), the
scenario's `sim:` block rules (scenario/schema_blocks.py), the virtual sim's config
(sim/virtual.py `config_from_settings`) and a launch's argv (server/sim.py `sim_flags`). It
sits at the bottom of the layers so that the server stage, below the sim, can spell a flag too.

A setting's name is vLLM's (underscores); its flag is the name with dashes, and a boolean's
false form puts `no-` after the dashes. Its default is its owner's: the field of the same name
in EngineConfig ("engine") or SimServerConfig ("server"), so the engine states it and the CLI
shows it.
`profile` and `faults` are not rows: a profile is chosen by name from sim/profiles.py and a
fault is parsed by sim/faults.py, each through its own option.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

# The KV pool holds a few lists per block (4M blocks took 680 MB, 10^12 a MemoryError); a speed
# of 1e-9 stretched a smoke run's virtual time until it never ended.
MAX_SIM_BLOCKS = 1 << 20
SIM_SPEED = (0.001, 1000.0)
# The sim server's window by default (SimServerConfig.max_model_len): here, below both, because
# the scenario stage checks prompts against it before any sim is imported (sim/server.py would
# bring aiohttp and the engine into `loadgen validate`).
SIM_MAX_MODEL_LEN = 8192

Owner = Literal["engine", "server"]


def sim_flag(name: str) -> str:
    """A setting's `loadgen sim` option: `max_num_seqs` -> `--max-num-seqs`."""
    return "--" + name.replace("_", "-")


def negated(flag: str) -> str:
    """A boolean option's false form: `--enable-prefix-caching` -> `--no-enable-prefix-caching`."""
    return f"--no-{flag[2:]}"


def setting_argv(name: str, value: Any) -> list[str]:
    """One setting as `loadgen sim` arguments: a boolean alone (or negated), else flag value."""
    flag = sim_flag(name)
    if isinstance(value, bool):
        return [flag if value else negated(flag)]
    return [flag, str(value)]


@dataclass(frozen=True, slots=True)
class SimOption:
    """One setting of the sim, and every face it shows."""

    name: str
    kind: type  # int, float or bool
    # "engine": an EngineConfig field of the same name holds it and its default; "server":
    # a SimServerConfig field.
    owner: Owner
    # Inclusive bounds (None: unbounded).
    lo: float | None = None
    hi: float | None = None
    help: str | None = None
    # Other names the same setting goes by (vLLM's), each a flag too.
    aliases: tuple[str, ...] = ()
    # A scenario's `sim:` block may set it.
    sim_block: bool = True
    # A sweep may vary it as a server flag (scenario/model.py SERVER_FLAGS).
    sweep: bool = True
    # One of the server's limits the launcher reads back from a booted sim (its flags, or the
    # virtual sim's config) for the verdicts and the preflight window check.
    fact: bool = False

    @property
    def flags(self) -> tuple[str, ...]:
        return tuple(sim_flag(n) for n in (self.name, *self.aliases))

    def int_bounds(self) -> tuple[int | None, int | None]:
        """An integer row's bounds as integers."""
        lo, hi = self.lo, self.hi
        return (None if lo is None else int(lo), None if hi is None else int(hi))


# In `loadgen sim --help`'s order.
SIM_OPTIONS = (
    SimOption("max_num_seqs", int, "engine", lo=1, fact=True),
    SimOption("max_num_batched_tokens", int, "engine", lo=1, fact=True),
    SimOption("block_size", int, "engine", lo=1, fact=True),
    SimOption("num_gpu_blocks", int, "engine", lo=1, hi=MAX_SIM_BLOCKS,
              help="KV pool size in blocks.", aliases=("num_gpu_blocks_override",), fact=True),
    SimOption("enable_prefix_caching", bool, "engine"),
    SimOption("long_prefill_token_threshold", int, "engine", lo=0, sim_block=False,
              help="Cap on one request's prefill chunk per step (0 = off)."),
    SimOption("num_speculative_tokens", int, "engine", lo=0),
    SimOption("acceptance_rate", float, "engine", lo=0.0, hi=1.0),
    SimOption("max_model_len", int, "server", lo=1, fact=True),
    SimOption("speed", float, "server", lo=SIM_SPEED[0], hi=SIM_SPEED[1],
              help="Time factor: 2 runs the engine twice as fast."),
    SimOption("request_overhead_s", float, "engine", lo=0.0, sim_block=False, sweep=False,
              help="Engine seconds before each request is scheduled (a TTFT floor)."),
    SimOption("api_delay_s", float, "server", lo=0.0, sweep=False,
              help="Engine seconds the API server holds each request before the engine sees "
                   "it (outside the TTFT histogram: a slow frontend or accept queue)."),
    SimOption("seed", int, "engine", sim_block=False, sweep=False),
    SimOption("reasoning_tokens", int, "server", lo=0, sweep=False,
              help="Chat answers open with N reasoning deltas (delta.reasoning), as vLLM's "
                   "reasoning parser emits a thinking model's output."),
)  # fmt: skip
# The rows that are server facts, in the table's order.
SIM_FACTS = tuple(o for o in SIM_OPTIONS if o.fact)
# Every name a setting goes by, aliases included.
SIM_OPTION_NAMES: Mapping[str, SimOption] = {
    n: o for o in SIM_OPTIONS for n in (o.name, *o.aliases)
}


def owned(settings: Mapping[str, Any], owner: Owner) -> dict[str, Any]:
    """The settings `owner`'s config takes, under its field names (an alias's value under its
    option's name; of two names for one setting the later wins). Other names are skipped."""
    out: dict[str, Any] = {}
    for name, value in settings.items():
        option = SIM_OPTION_NAMES.get(name)
        if option is not None and option.owner == owner:
            out[option.name] = value
    return out
