"""The `llama.cpp` profile: llama.cpp's own llama-server: the one named with --server-bin, else
LOADGEN_LLAMA_SERVER, else `llama-server` on PATH, else the tests' build
(tools/build_llama_server.sh). GPU offload flags (`-ngl 99`, `--flash-attn on`) pass through
as given; the offload, the CUDA device and flash attention are read back from its log
(bootlog.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from loadgen.server import installs
from loadgen.server.profile import DefaultFlag, Profile
from loadgen.server.vllm import cpu_threads


class LlamaCppProfile(Profile):
    name = "llama.cpp"
    boot_timeout_s = 60.0  # boots in well under a second with the tiny model
    default_flags: tuple[DefaultFlag, ...] = (
        (("-c", "--ctx-size"), ("32768",)),
        (("-np", "--parallel"), ("4",)),
        # llama.cpp's own default, stated so the step budget is a known fact.
        (("-b", "--batch-size"), ("2048",)),
        (("-cb", "--cont-batching", "-nocb", "--no-cont-batching"), ()),
        # One core is the client's (on the tests' 2 cores: one thread).
        (("-t", "--threads"), (str(cpu_threads()),)),
        (("--metrics",), ()),
        (("--jinja", "--no-jinja"), ()),
    )
    fact_flags: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "kv_cache_tokens": ("-c", "--ctx-size"),
        "max_num_seqs": ("-np", "--parallel"),
        "max_num_batched_tokens": ("-b", "--batch-size"),
    }

    def __init__(self, bin: Path | None = None) -> None:
        self.bin = bin

    def executable(self) -> Path:
        return self.bin or installs.llama_server_bin()

    def argv(self, *, port: int, model: Path, served_name: str, flags: Sequence[str]) -> list[str]:
        return [
            str(self.executable()),
            "-m",
            str(model),
            "-a",
            served_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *flags,
        ]
