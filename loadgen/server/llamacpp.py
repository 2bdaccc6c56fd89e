"""The `llama.cpp` profile: llama.cpp's own llama-server, built from source by
tools/build_llama_server.sh, serving the tiny model converted to GGUF."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from loadgen.server import installs
from loadgen.server.profile import DefaultFlag, Profile


class LlamaCppProfile(Profile):
    name = "llama.cpp"
    boot_timeout_s = 60.0  # boots in well under a second with the tiny model
    default_flags: tuple[DefaultFlag, ...] = (
        (("-c", "--ctx-size"), ("32768",)),
        (("-np", "--parallel"), ("4",)),
        # llama.cpp's own default, stated so the step budget is a known fact.
        (("-b", "--batch-size"), ("2048",)),
        (("-cb", "--cont-batching", "-nocb", "--no-cont-batching"), ()),
        # One thread: the other core is the client's.
        (("-t", "--threads"), ("1",)),
        (("--metrics",), ()),
        (("--jinja", "--no-jinja"), ()),
    )
    fact_flags: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "kv_cache_tokens": ("-c", "--ctx-size"),
        "max_num_seqs": ("-np", "--parallel"),
        "max_num_batched_tokens": ("-b", "--batch-size"),
    }

    def default_model(self) -> Path:
        return installs.tiny_gguf()

    def argv(self, *, port: int, model: Path, served_name: str, flags: Sequence[str]) -> list[str]:
        return [
            str(installs.llama_server_bin()),
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
