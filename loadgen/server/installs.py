"""Where the real servers and the tiny model live once tools/setup_real.py has made them.

Everything sits outside the clone, under $LOADGEN_CACHE (default ~/.cache/loadgen), keyed by
version, so a fresh CI clone reuses what an earlier run built. LOADGEN_VLLM_PYTHON and
LOADGEN_LLAMA_SERVER point at installs of one's own instead.
"""

from __future__ import annotations

import os
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
    override = os.environ.get("LOADGEN_LLAMA_SERVER")
    return Path(override) if override else llama_cpp_dir() / "bin" / "llama-server"


def tiny_model_dir() -> Path:
    return cache_dir() / TINY_MODEL_NAME


def tiny_gguf() -> Path:
    return cache_dir() / f"{TINY_MODEL_NAME}-gguf" / f"{TINY_MODEL_NAME}-bf16.gguf"


def state_dir(profile: str) -> Path:
    """A writable folder for a server's own caches (XDG_CACHE_HOME, VLLM_CACHE_ROOT)."""
    return cache_dir() / "state" / profile
