"""Sweeps over server flags: a fresh server per boot, several boots per arm, interleaved.

Every server-flag arm is a restart, so an A/B across arms compares boots (seed 000, "Retest"):
the sweep boots each arm `boots_per_arm` times (2 for a real server, 1 for the deterministic
sim unless the scenario asks for more), in rounds A B C A B C (or a seeded shuffle of each
round that never puts one arm twice in a row), so drift over the session cannot pose as an
effect. Arms that differ only client-side share a boot. Each boot, before it is measured:
one token for readiness, a discarded warm-up, and, when the scenario's prompts are shared or
primed, the sized cache probe; a boot whose cache is dead is restarted once, then reported as
cache-dead and not measured. What each boot served before measurement is recorded.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.client.openai import OpenAIClient
from loadgen.codec import to_json
from loadgen.engine.probe_cache import ProbeRefused, probe_cache, probe_size
from loadgen.engine.target import Target, launch_target, server_spec_for
from loadgen.records import StreamRecord
from loadgen.run_manifest import CacheCheck
from loadgen.scenario.model import Scenario
from loadgen.scenario.plan import ArmPlan, Plan
from loadgen.server import installs
from loadgen.server.profile import Profile
from loadgen.server.readback import first_token
from loadgen.server.spec import profile_for

CACHE_ATTEMPTS = 2  # a cache-dead boot is restarted once
WARMUP_TOKENS = 16


@dataclass(frozen=True, slots=True)
class BootGroup:
    """Arms that share one server configuration (they differ only client-side)."""

    key: str
    flags: dict[str, Any]
    arms: tuple[ArmPlan, ...]


def flag_groups(arms: Sequence[ArmPlan]) -> list[BootGroup]:
    """Arms grouped by their server flags, in the order the first of each appears."""
    groups: dict[str, list[ArmPlan]] = {}
    for arm in arms:
        groups.setdefault(json.dumps(arm.flags, sort_keys=True, default=str), []).append(arm)
    return [BootGroup(k, dict(v[0].flags), tuple(v)) for k, v in groups.items()]


def boot_order(n_groups: int, boots: int, seed: int | None = None) -> list[tuple[int, int]]:
    """(group index, boot number from 1) in run order: round after round, each round every group
    once. With a seed each round is shuffled, and a round that would start with the group the
    last one ended with is rotated, so no group boots twice in a row (with 2 or more groups)."""
    rng = random.Random(seed) if seed is not None else None
    order: list[tuple[int, int]] = []
    for boot in range(1, boots + 1):
        round_ = list(range(n_groups))
        if rng is not None:
            rng.shuffle(round_)
            if order and n_groups > 1 and round_[0] == order[-1][0]:
                round_ = round_[1:] + round_[:1]
        order += [(g, boot) for g in round_]
    return order


def boots_per_arm(plan: Plan, profile: Profile) -> int:
    if plan.boots_per_arm is not None:
        return plan.boots_per_arm
    return profile.default_boots_per_arm


def uses_cache(scenario: Scenario) -> bool:
    """Whether any group's prompts are meant to hit the prefix cache."""
    return any(g.prompt.cache in ("shared", "primed") for g in scenario.groups)


def arm_run_dir(root: Path, arm: str, boot: int, boots: int) -> Path:
    """arms/<arm>/ with one boot per arm (the layout of every sweep before boots), else
    arms/<arm>.boot<k>/, one run directory per boot."""
    return root / "arms" / (arm if boots == 1 else f"{arm}.boot{boot}")


RunArm = Callable[[ArmPlan, Path, Target, dict[str, Any]], Any]


async def run_boots(
    plan: Plan,
    root: Path,
    opts: Any,
    warn: Callable[[str], None],
    run_arm: RunArm,
    on_boot: Callable[[list[dict[str, Any]], int], None],
) -> list[dict[str, Any]]:
    """Boots every group `boots_per_arm` times in interleaved order and runs its arms on each
    healthy boot. `on_boot(boots, boots_per_arm)` is called whenever a boot's record changes
    (so run.json names the server's pid while it runs)."""
    spec = server_spec_for(plan.scenario, opts)
    n = boots_per_arm(plan, profile_for(spec))
    groups = flag_groups(plan.arms)
    probe = uses_cache(plan.scenario)
    records: list[dict[str, Any]] = []
    for order, (gi, boot) in enumerate(boot_order(len(groups), n, opts.boot_order_seed), 1):
        group = groups[gi]
        record: dict[str, Any] = {
            "order": order, "boot": boot, "of": n, "flags": group.flags,
            "arms": [a.name for a in group.arms], "status": "booting", "attempts": [],
        }  # fmt: skip
        records.append(record)
        for attempt in range(1, CACHE_ATTEMPTS + 1):
            boot_dir = root / "boots" / f"{order:02d}-b{boot}-a{attempt}"
            inherited = _inherited_state(spec.kind)
            async with launch_target(group.arms[0], opts, log_dir=boot_dir, warn=warn) as target:
                tried = _attempt_record(target, attempt, boot, order, records, root, boot_dir)
                tried["warm_state"] |= inherited
                record["attempts"].append(tried)
                on_boot(records, n)
                if probe:
                    check, sent = await _cache_probe(
                        target, f"boot{order}a{attempt}-{plan.seed}", warn
                    )
                    tried["probe"] = check and to_json(check)
                    tried["served_before_measure"] += sent
                    if check and check.verdict in ("mismatch", "inconclusive"):
                        # Measured all the same: the cache reuses (mismatch) or may (unknown).
                        what = {"mismatch": "answers wrong", "inconclusive": "state unknown"}
                        warn(f"boot {order} ({_label(group)}): cache {what[check.verdict]}: "
                             f"{check.reason}")  # fmt: skip
                    if check and check.verdict == "dead":
                        tried["status"] = record["status"] = "cache_dead"
                        warn(f"boot {order} ({_label(group)}): cache dead: {check.reason}")
                        on_boot(records, n)
                        continue
                await asyncio.to_thread(
                    first_token, target.url, target.model or "", max_tokens=WARMUP_TOKENS
                )
                tried["served_before_measure"] += 1
                tried["status"] = record["status"] = "measuring"
                on_boot(records, n)
                record["runs"] = []
                for arm in group.arms:
                    path = arm_run_dir(root, arm.name, boot, n)
                    record["runs"].append({"arm": arm.name, "dir": str(path.relative_to(root))})
                    await run_arm(arm, path, target, _boot_facts(record, tried))
                tried["status"] = record["status"] = "measured"
                on_boot(records, n)
                break
    return records


def _label(group: BootGroup) -> str:
    return ",".join(f"{k}={v}" for k, v in group.flags.items()) or "base flags"


def _inherited_state(kind: str) -> dict[str, Any]:
    """Whether the server's own cache folder (compile and JIT caches) held anything before this
    boot: a boot that inherits warm caches and one that starts cold differ (seed 002)."""
    state = installs.state_dir(kind)
    return {
        "state_dir": str(state),
        "state_inherited": state.is_dir() and any(state.iterdir()),
    }


def _attempt_record(
    target: Target,
    attempt: int,
    boot: int,
    order: int,
    records: list[dict[str, Any]],
    root: Path,
    boot_dir: Path,
) -> dict[str, Any]:
    """What this boot is: its process, environment read back, version, and its warm state."""
    earlier = sum(len(r["attempts"]) for r in records)
    facts = dict(target.boot or {})
    log = Path(facts.get("boot_log", ""))
    facts["boot_log"] = str(log.relative_to(root)) if log.is_relative_to(root) else str(log)
    return {
        "attempt": attempt,
        "boot_dir": str(boot_dir.relative_to(root)),
        **facts,
        # The readiness probe generated one token; nothing else ran on this process yet.
        "served_before_measure": 1,
        "warm_state": {
            "fresh_process": True,
            "boot_of_this_arm": boot,
            "server_boots_before_in_this_run": earlier,
        },
        "status": "booted",
    }


def _boot_facts(record: dict[str, Any], tried: dict[str, Any]) -> dict[str, Any]:
    """The boot as the arm's run.json records it."""
    return {
        "order": record["order"],
        "boot": record["boot"],
        "of": record["of"],
        "attempt": tried["attempt"],
        "pid": tried.get("pid"),
        "served_before_measure": tried["served_before_measure"],
        "warm_state": tried["warm_state"],
        "probe": tried.get("probe"),
    }


async def _cache_probe(
    target: Target, salt: str, warn: Callable[[str], None]
) -> tuple[CacheCheck | None, int]:
    """The sized warm pair on this boot and the requests it sent (the floor, the sizing sends,
    the pair and the repeat); None (with a warning) when no probe can be sized."""
    try:
        block = target.facts.get("block_size")
        window = target.facts.get("max_model_len")
        size = probe_size(None, block, target.fact_sources.get("block_size"), window)
    except ProbeRefused as exc:
        warn(f"{exc}: this boot is measured unprobed")
        return None, 0
    sent: list[StreamRecord] = []
    async with OpenAIClient(target.url, concurrency=1) as client:
        check = await probe_cache(
            client, model=target.model or "", size=size, salt=salt, on_record=sent.append
        )
    return check, len(sent)
