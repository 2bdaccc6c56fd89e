"""What a run talks to: a server given by URL, or one launched for the arm (the built-in sim by
default; vLLM, llama-server or the sim with `--server`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.codec import to_json
from loadgen.run_manifest import TargetInfo, TargetPart
from loadgen.scenario.model import Scenario
from loadgen.scenario.plan import ArmPlan
from loadgen.server.boot import Boot, boot_server
from loadgen.server.profile import Profile
from loadgen.server.sim import SIM_MODEL as SIM_MODEL
from loadgen.server.sim import sim_flags
from loadgen.server.spec import ServerSpec, flag_args, profile_for

DEFAULT_SERVER = ServerSpec("sim")


class RunError(Exception):
    """A run cannot start as asked; the message is one line that says what to change."""


@dataclass
class Target:
    url: str
    kind: str  # the launched server's kind ("sim", "vllm", "sglang", ...) or "external" (by URL)
    model: str | None
    facts: dict[str, int] = field(default_factory=dict)
    fact_sources: dict[str, str] = field(default_factory=dict)
    speed: float = 1.0
    flags: list[str] = field(default_factory=list)
    boot_log: str | None = None
    boot: dict[str, Any] | None = None  # a launched server's boot record (pid, env read back)
    # Why a limit of a launched server stayed unknown (its profile's reasons), by fact name.
    unknown: dict[str, str] = field(default_factory=dict)
    # Every replica's URL where the run routes over several (`url` is the first, whose facts
    # and model stand for all); empty for one server.
    replicas: list[str] = field(default_factory=list)
    # The server's log as it is written: a launched server's, or --server-log's.
    log_path: Path | None = None

    def learn(self, facts: Mapping[str, int], source: str) -> None:
        """Adds facts not already known; the first source to state a fact is kept."""
        for name, value in facts.items():
            if name not in self.facts:
                self.facts[name] = value
                self.fact_sources[name] = source

    def part(self) -> TargetPart:
        """run.json's account of the target, as far as it is known now."""
        server: dict[str, Any] = dict(self.facts)
        server["sources"] = dict(self.fact_sources)
        # One `source` for readers that want a single word: where the cap came from.
        server["source"] = self.fact_sources.get("max_num_seqs")
        unknown = {k: why for k, why in self.unknown.items() if k not in self.facts}
        if unknown:
            server["unknown"] = unknown
        target = TargetInfo(self.url, self.kind, tuple(self.flags), self.boot_log)
        return TargetPart(target, server, self.speed, self.boot or None)


@asynccontextmanager
async def open_target(
    arm: ArmPlan, opts: Any, *, log_dir: Path, warn: Callable[[str], None]
) -> AsyncIterator[Target]:
    """The arm's target for the duration of the block: the given URL, or a fresh server booted
    with the arm's flags (the sim: with the scenario's `sim:` block too)."""
    if opts.base_url:
        if arm.flags:
            raise RunError(
                f"arm {arm.name!r} sets server flags {arm.flags}: loadgen cannot restart a "
                "server it did not start; drop --base-url to sweep on the built-in sim"
            )
        target = Target(
            url=opts.base_url, kind="external", model=opts.model,
            flags=list(opts.server_flags), replicas=list(opts.replica_urls),
            log_path=opts.server_log,
        )  # fmt: skip
        sources = opts.server_facts_sources or {}
        for name, value in (opts.server_facts or {}).items():
            target.learn({name: value}, sources.get(name, "flags"))
        if opts.block_size:
            target.learn({"block_size": opts.block_size}, "flags")
        yield target
        return
    if opts.sim_replicas > 1:
        async with launch_replicas(arm, opts, log_dir=log_dir, warn=warn) as target:
            yield target
        return
    async with launch_target(arm, opts, log_dir=log_dir, warn=warn) as target:
        yield target


@asynccontextmanager
async def launch_replicas(
    arm: ArmPlan, opts: Any, *, log_dir: Path, warn: Callable[[str], None]
) -> AsyncIterator[Target]:
    """`opts.sim_replicas` boots of the run's server, each on its own port with its logs under
    replicas/<i>/; the first's Target, naming every replica's URL."""
    async with AsyncExitStack() as stack:
        booted = [
            await stack.enter_async_context(
                launch_target(arm, opts, log_dir=log_dir / "replicas" / str(i), warn=warn)
            )
            for i in range(opts.sim_replicas)
        ]
        booted[0].replicas = [t.url for t in booted]
        yield booted[0]


@asynccontextmanager
async def launch_target(
    arm: ArmPlan, opts: Any, *, log_dir: Path, warn: Callable[[str], None]
) -> AsyncIterator[Target]:
    """A fresh boot of the run's server (opts.server, default the sim) with the arm's flags."""
    spec = server_spec_for(arm.scenario, opts)
    settings: dict[str, Any] = {}
    profile = profile_for(spec)
    if profile.configured_by_sim_block:
        settings = sim_settings(arm)
        literal = {k: settings.pop(k) for k in list(settings) if k.startswith("-")}
        flags = sim_flags(settings) + flag_args(profile_for(spec), literal)
    else:
        if arm.scenario.sim is not None:
            warn(f"scenario's sim: block is ignored: the run launches {spec.kind}")
        flags = flag_args(profile_for(spec, arm.flags), arm.flags)
    async with boot_server(spec, flags, log_dir=log_dir, values=arm.flags) as booted:
        yield _launched(spec, profile, booted, float(settings.get("speed", 1.0)), log_dir)


def server_spec_for(scenario: Scenario, opts: Any) -> ServerSpec:
    """The server a run launches: --server, else the scenario's `server:` block, else the sim."""
    given: ServerSpec | None = getattr(opts, "server", None)
    if given is not None:
        return given
    block = scenario.server
    if block is None:
        return DEFAULT_SERVER
    return ServerSpec(
        block.kind, block.args, block.model_path, block.env, block.command, block.served_name,
        python=block.python, bin=block.bin, boot_timeout_s=block.boot_timeout_s,
    )  # fmt: skip


def _launched(
    spec: ServerSpec, profile: Profile, booted: Boot, speed: float, log_dir: Path
) -> Target:
    server = booted.server
    target = Target(
        url=server.url, kind=spec.kind, model=server.model, flags=list(server.flags), speed=speed,
        boot_log=_relative(server.log_path, log_dir), boot=booted.record(),
        unknown=dict(server.facts.unknown), log_path=server.log_path,
    )  # fmt: skip
    facts = {k: v for k, v in to_json(server.facts).items() if isinstance(v, int)}
    for name, value in facts.items():
        source = profile.name if profile.configured_by_sim_block else server.facts.sources[name]
        target.learn({name: value}, source)
    return target


def _relative(path: Path, root: Path) -> str:
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def sim_settings(arm: ArmPlan) -> dict[str, Any]:
    sim = arm.scenario.sim
    if sim is None:
        return dict(arm.flags)
    base: dict[str, Any] = {"profile": sim.profile, **sim.flags()}
    if sim.faults:
        base["faults"] = list(sim.faults)
    return base | dict(arm.flags)
