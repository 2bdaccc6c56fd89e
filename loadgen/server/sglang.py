"""The `sglang` profile: the user's SGLang (`python -m sglang.launch_server`), found like vLLM
(--server-python / --server-bin, `sglang` on PATH, this environment).

Swept flags are written the vLLM way and spelled here the SGLang way; its limits come from its
start-up log line (bootlog.py), then /server_info (/get_server_info before it was renamed:
python/sglang/srt/entrypoints/http_server.py), then the flags.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from loadgen.server import installs
from loadgen.server.profile import InstalledProfile, Layer

# /server_info key -> fact. page_size, chunked_prefill_size, max_running_requests and
# context_length are ServerArgs fields; max_total_num_tokens is the scheduler's pool.
SERVER_INFO_FACTS = {
    "page_size": "block_size",
    "max_total_num_tokens": "kv_cache_tokens",
    "chunked_prefill_size": "max_num_batched_tokens",
    "max_running_requests": "max_num_seqs",
    "context_length": "max_model_len",
}


def server_info_facts(info: Mapping[str, object]) -> dict[str, int]:
    """The integer limits in a /server_info answer; the first internal state (one per data
    parallel rank) fills what the top level leaves out."""
    states = info.get("internal_states")
    first = states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else {}
    facts: dict[str, int] = {}
    for key, fact in SERVER_INFO_FACTS.items():
        value = info.get(key, first.get(key))
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            facts[fact] = value
    return facts


class SglangProfile(InstalledProfile):
    name = "sglang"
    # SGLang captures CUDA graphs after loading the weights: minutes for a large model.
    boot_timeout_s = 900.0
    draft_flag_prefix = "--speculative"
    fact_flags: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "max_num_seqs": ("--max-running-requests",),
        "max_num_batched_tokens": ("--chunked-prefill-size",),
        "block_size": ("--page-size",),
        "max_model_len": ("--context-length",),
    }
    bool_flags: ClassVar[Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]]] = {
        # SGLang's prefix cache is its radix tree, on unless disabled.
        "enable_prefix_caching": ((), ("--disable-radix-cache",)),
    }

    def find_install(
        self, python: Path | None, bin: Path | None
    ) -> tuple[installs.PythonInstall, str]:
        return installs.find_sglang(python, bin)

    def default_boot_timeout_s(self) -> float:
        self.install  # noqa: B018 -- a missing install is reported before the boot starts
        return self.boot_timeout_s

    def argv(self, *, port: int, model: Path, served_name: str, flags: Sequence[str]) -> list[str]:
        return [
            str(self.install.python), "-m", "sglang.launch_server", "--model-path", str(model),
            "--served-model-name", served_name, "--host", "127.0.0.1", "--port", str(port),
            "--enable-metrics", *flags,
        ]  # fmt: skip

    def env(self, state_dir: Path) -> dict[str, str]:
        return {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}

    def queried_facts(self, get: Callable[[str], tuple[int, str]]) -> list[Layer]:
        for path in ("/server_info", "/get_server_info"):
            status, body = get(path)
            if status != 200:
                continue
            try:
                info = json.loads(body)
            except ValueError:
                continue
            if isinstance(info, dict):
                return [("server_info", server_info_facts(info))]
        return []
