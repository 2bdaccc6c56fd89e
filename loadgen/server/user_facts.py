"""What the user knows about an external server: its limits (`--server-facts`) and the flags it
was launched with (`--server-flags`).

vLLM does not publish max-num-seqs or the step token budget, so against a server loadgen did
not launch those limits are unknown unless the user states them; stated ones are labelled
`user` wherever a verdict uses them. The flags are recorded as given, so two runs against two
differently launched servers can be told apart from their run.json alone.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable

# Facts a verdict or report reads, with the least value each may take.
USER_FACTS = {
    "block_size": 1,
    "num_gpu_blocks": 1,
    "kv_cache_tokens": 1,
    "max_num_batched_tokens": 1,
    "max_num_seqs": 1,
    "max_model_len": 1,
    "num_speculative_tokens": 0,
}
USER_SOURCE = "user"


def parse_server_facts(items: Iterable[str]) -> dict[str, int]:
    """`KEY=N[,KEY=N...]` items (a flag may repeat) as facts; raises ValueError with one line
    naming the bad item and listing the valid keys."""
    facts: dict[str, int] = {}
    for item in items:
        for pair in filter(None, (p.strip() for p in item.split(","))):
            key, sep, raw = (s.strip() for s in pair.partition("="))
            if not sep or key not in USER_FACTS:
                why = "not KEY=VALUE" if not sep else f"unknown key {key!r}"
                raise ValueError(f"--server-facts {pair}: {why}; valid keys: {_valid()}")
            least = USER_FACTS[key]
            if not raw.isdigit() or int(raw) < least:
                raise ValueError(
                    f"--server-facts {pair}: {key} must be a whole number >= {least};"
                    f" valid keys: {_valid()}"
                )
            facts[key] = int(raw)
    return facts


def parse_server_flags(items: Iterable[str]) -> list[str]:
    """The server's launch flags as the user gave them, split the way a shell would."""
    out: list[str] = []
    for item in items:
        try:
            out += shlex.split(item)
        except ValueError as exc:
            raise ValueError(f"--server-flags {item!r}: {exc}") from None
    return out


def _valid() -> str:
    return ", ".join(USER_FACTS)
