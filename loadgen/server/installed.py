"""`loadgen servers`: which server kinds are installed here, their versions and builds, and
the command line each would be started with. One small check per kind, run side by side
(no server package is imported), so it answers in well under a second."""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from loadgen.server import installs
from loadgen.server.llamacpp import LlamaCppProfile
from loadgen.server.profile import Profile
from loadgen.server.sglang import SglangProfile
from loadgen.server.vllm import VllmProfile

PLACEHOLDER_PORT = 8000
PLACEHOLDER_MODEL = Path("MODEL")


@dataclass(frozen=True, slots=True)
class Installed:
    """One kind as found here: `version` None when it is not installed (`where` says why)."""

    kind: str
    version: str | None
    build: str | None
    where: str
    argv: tuple[str, ...] = ()


def _argv(profile: Profile) -> tuple[str, ...]:
    """The argv with placeholders; a `-c` script on one line (its lines joined with "; ")."""
    flags = profile.effective_flags([])
    argv = profile.argv(
        port=PLACEHOLDER_PORT, model=PLACEHOLDER_MODEL, served_name="NAME", flags=flags
    )
    return tuple("; ".join(x for x in a.splitlines() if x.strip()) for a in argv)


def _python_kind(kind: str, find: Callable[[], tuple[installs.PythonInstall, str]]) -> Installed:
    try:
        found, origin = find()
    except installs.InstallNotFound as exc:
        return Installed(kind, None, None, str(exc))
    profile: Profile = VllmProfile(found.python) if kind == "vllm" else SglangProfile(found.python)
    build = found.build + (f" (torch {found.torch})" if found.torch else "")
    where = f"{found.dist} under {found.python}, from {origin}"
    return Installed(kind, found.version, build, where, _argv(profile))


def llama_server_version(binary: Path) -> str | None:
    """llama-server's `--version` line ("version: 1 (abc123)"), None if it does not run."""
    try:
        done = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in (done.stdout + done.stderr).splitlines():
        if line.startswith("version:"):
            return line.split(":", 1)[1].strip()
    return None


def _llama_kind() -> Installed:
    profile = LlamaCppProfile()
    binary = profile.executable()
    version = llama_server_version(binary) if binary.exists() else None
    if version is None:
        why = (
            f"no llama-server at {binary} (put one on PATH, or LOADGEN_LLAMA_SERVER, --server-bin)"
        )
        return Installed("llama.cpp", None, None, why)
    return Installed("llama.cpp", version, None, str(binary), _argv(profile))


def installed_servers() -> list[Installed]:
    """Every launchable kind, inspected side by side."""
    jobs: list[Callable[[], Installed]] = [
        lambda: _python_kind("vllm", installs.find_vllm),
        lambda: _python_kind("sglang", installs.find_sglang),
        _llama_kind,
    ]
    with ThreadPoolExecutor(len(jobs)) as pool:
        return list(pool.map(lambda job: job(), jobs))


def render(found: list[Installed]) -> str:
    lines = []
    for item in found:
        if item.version is None:
            lines.append(f"{item.kind}: not installed: {item.where}")
            continue
        build = f", {item.build}" if item.build else ""
        lines.append(f"{item.kind}: {item.version}{build}; {item.where}")
        lines.append(f"  starts as: {shlex.join(item.argv)}")
    lines.append("sim: built in (loadgen sim)")
    return "\n".join(lines)
