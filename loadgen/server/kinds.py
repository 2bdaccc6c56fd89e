"""Every server kind loadgen launches, one entry each: how its profile is made from the install
a user names (or that is found). The profile holds the rest of the kind: its argv, flags spelled
its way, boot-log facts, readiness, and traits (deterministic, boots per arm, default served
name). The built-in sim is registered like the others; a `server: {kind: command}` template is
built from the scenario (server/spec.py) and so is not an entry."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from loadgen.server.llamacpp import LlamaCppProfile
from loadgen.server.profile import Profile
from loadgen.server.sglang import SglangProfile
from loadgen.server.sim import SimProfile
from loadgen.server.vllm import VllmProfile

# kind -> profile from (python, bin): the interpreter and the executable the user named.
KINDS: Mapping[str, Callable[[Path | None, Path | None], Profile]] = {
    "vllm": VllmProfile,
    "sglang": SglangProfile,
    "llama.cpp": lambda python, bin: LlamaCppProfile(bin),
    "sim": lambda python, bin: SimProfile(),
}
SERVER_KINDS = tuple(KINDS)


def kind_profile(kind: str, python: Path | None = None, bin: Path | None = None) -> Profile:
    """A fresh profile of the kind; vLLM and SGLang from the install named (or found)."""
    try:
        make = KINDS[kind]
    except KeyError:
        raise ValueError(
            f"unknown server kind {kind!r}; known: {', '.join(SERVER_KINDS)}"
        ) from None
    return make(python, bin)
