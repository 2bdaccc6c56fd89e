"""The `sim` profile: loadgen's own simulated vLLM, launched like any real server.

Running it in its own process keeps the simulator's work off the client's event loop (and on
the other core), and lets sweeps restart it per arm through the same launcher as vLLM.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from loadgen.server.profile import Profile
from loadgen.simoptions import SIM_FACTS, setting_argv, sim_flag

SIM_MODEL = "loadgen-sim"


class SimProfile(Profile):
    name = "sim"
    boot_timeout_s = 30.0
    deterministic = True
    default_boots_per_arm = 1
    default_served_name = SIM_MODEL
    configured_by_sim_block = True
    reads_cache_config_metric = True
    fact_flags: ClassVar[Mapping[str, tuple[str, ...]]] = {
        o.name: (sim_flag(o.name),) for o in SIM_FACTS
    }

    def default_model(self) -> Path:
        # The sim has no weights; the launcher wants a path that exists, and this one does.
        return Path(__file__)

    def argv(self, *, port: int, model: Path, served_name: str, flags: Sequence[str]) -> list[str]:
        return [
            sys.executable, "-m", "loadgen", "sim", "--host", "127.0.0.1", "--port", str(port),
            "--model", served_name, *flags,
        ]  # fmt: skip


def sim_flags(settings: Mapping[str, Any]) -> list[str]:
    """`loadgen sim` options from a scenario's `sim:` block (vLLM flag names, underscores),
    spelled as loadgen/simoptions.py spells them."""
    out: list[str] = []
    for name, value in settings.items():
        if name == "faults":
            for fault in value:
                out += ["--fault", str(fault)]
        else:
            out += setting_argv(name, value)
    return out
