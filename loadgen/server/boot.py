"""One boot of a launched server, ready to measure: launched on a free loopback port, one token
generated, its environment read back from /proc and its version asked for.

    async with boot_server(spec, flags, log_dir=run_dir) as b:
        b.server.url, b.server.facts, b.environment, b.version
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.codec import to_json
from loadgen.server import installs
from loadgen.server.launcher import Server, ServerBootError, launch
from loadgen.server.readback import environment_record, first_token, server_version
from loadgen.server.spec import ServerSpec, launch_flags, profile_for


@dataclass(frozen=True)
class Boot:
    server: Server
    environment: dict[str, Any]
    version: str | None

    def record(self) -> dict[str, Any]:
        """The boot's facts for run.json."""
        s = self.server
        return {
            "kind": s.profile, "pid": s.pid, "url": s.url, "argv": list(s.argv),
            "flags": list(s.flags), "boot_s": s.boot_ns / 1e9, "boot_log": str(s.log_path),
            "facts": to_json(s.facts), "environment": self.environment, "version": self.version,
        }  # fmt: skip


def served_name(spec: ServerSpec) -> str:
    if spec.served_name:
        return spec.served_name
    default = profile_for(spec).default_served_name
    if default:
        return default
    if spec.model_path:
        return spec.model_path.name
    return spec.model_name or installs.TINY_MODEL_NAME


@asynccontextmanager
async def boot_server(
    spec: ServerSpec,
    flags: Sequence[str],
    *,
    log_dir: Path,
    values: Mapping[str, Any] | None = None,
) -> AsyncIterator[Boot]:
    """A ready server for the block; its process group is stopped on the way out, also on error
    or cancellation (the launcher's guarantee). `values`: the swept flags, for a command
    template."""
    profile = profile_for(spec, values)
    name = served_name(spec)
    model = spec.model_path if spec.model_path is not None else spec.model_name
    async with launch(
        profile, flags=launch_flags(spec.args, flags), log_dir=log_dir, model=model,
        served_name=name, boot_timeout_s=spec.boot_timeout_s,
    ) as server:  # fmt: skip
        try:
            await asyncio.to_thread(first_token, server.url, name)
        except OSError as exc:
            raise ServerBootError(
                f"{profile.name} server answered /health but failed its first token ({exc}); "
                f"boot log: {server.log_path}"
            ) from None
        set_env = profile.env(installs.state_dir(profile.name))
        environment = environment_record(server.pid, set_env)
        version = await asyncio.to_thread(server_version, server.url)
        yield Boot(server, environment, version)
