"""What a run talks to: a server given by URL, or the built-in sim launched for the arm."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.scenario.plan import ArmPlan
from loadgen.server.launcher import launch
from loadgen.server.sim import SimProfile, sim_flags

SIM_MODEL = "loadgen-sim"


class RunError(Exception):
    """A run cannot start as asked; the message is one line that says what to change."""


@dataclass
class Target:
    url: str
    kind: str  # "sim" (launched here) or "external" (given by URL)
    model: str | None
    facts: dict[str, int] = field(default_factory=dict)
    fact_sources: dict[str, str] = field(default_factory=dict)
    speed: float = 1.0
    flags: list[str] = field(default_factory=list)
    boot_log: str | None = None

    def learn(self, facts: Mapping[str, int], source: str) -> None:
        """Adds facts not already known; the first source to state a fact is kept."""
        for name, value in facts.items():
            if name not in self.facts:
                self.facts[name] = value
                self.fact_sources[name] = source

    def manifest(self) -> dict[str, Any]:
        server = dict(self.facts)
        server["sources"] = dict(self.fact_sources)
        # One `source` for readers that want a single word: where the cap came from.
        server["source"] = self.fact_sources.get("max_num_seqs")
        return {
            "target": {
                "url": self.url, "kind": self.kind, "flags": self.flags, "boot_log": self.boot_log
            },
            "server": server,
            "speed": self.speed,
        }  # fmt: skip


@asynccontextmanager
async def open_target(
    arm: ArmPlan, opts: Any, *, log_dir: Path, warn: Callable[[str], None]
) -> AsyncIterator[Target]:
    """The arm's target for the duration of the block: the given URL, or a fresh sim booted
    with the scenario's `sim:` block and the arm's flags (one boot per arm)."""
    if opts.base_url:
        if arm.flags:
            raise RunError(
                f"arm {arm.name!r} sets server flags {arm.flags}: loadgen cannot restart a "
                "server it did not start; drop --base-url to sweep on the built-in sim"
            )
        target = Target(
            url=opts.base_url, kind="external", model=opts.model,
            flags=list(opts.server_flags),
        )  # fmt: skip
        sources = opts.server_facts_sources or {}
        for name, value in (opts.server_facts or {}).items():
            target.learn({name: value}, sources.get(name, "flags"))
        if opts.block_size:
            target.learn({"block_size": opts.block_size}, "flags")
        yield target
        return
    settings = sim_settings(arm)
    flags = sim_flags(settings)
    async with launch(SimProfile(), flags=flags, log_dir=log_dir, served_name=SIM_MODEL) as server:
        target = Target(
            url=server.url, kind="sim", model=server.model, flags=list(server.flags),
            speed=float(settings.get("speed", 1.0)), boot_log=server.log_path.name,
        )  # fmt: skip
        target.learn({k: v for k, v in server.facts.to_json().items() if isinstance(v, int)}, "sim")
        yield target


def sim_settings(arm: ArmPlan) -> dict[str, Any]:
    sim = arm.scenario.sim
    if sim is None:
        return dict(arm.flags)
    base: dict[str, Any] = {"profile": sim.profile, **sim.flags()}
    if sim.faults:
        base["faults"] = list(sim.faults)
    return base | dict(arm.flags)
