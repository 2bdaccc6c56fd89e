"""What a launched server really runs with, read back rather than trusted: its environment from
/proc/PID/environ, its version, and one generated token (ready means it serves, not just that
/health answers)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loadgen.client.errors import read_capped_sync

# Variables worth recording beyond the ones the launch set: the knobs that change a server's
# behaviour without a flag. Anything else (tokens, keys, paths of the user's shell) stays out.
RECORDED_PREFIXES = ("VLLM_", "LLAMA_", "OMP_", "MKL_", "HF_", "TRANSFORMERS_", "CUDA_", "PYTORCH_")


def read_environ(pid: int) -> dict[str, str] | None:
    """The process's environment as it started (None when /proc cannot be read)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def environment_record(pid: int, set_by_launch: Mapping[str, str]) -> dict[str, Any]:
    """What the launch set, what the process holds of it and of RECORDED_PREFIXES, and every
    variable whose read-back value differs from what was set."""
    env = read_environ(pid)
    if env is None:
        return {"set": dict(set_by_launch), "read_back": None, "mismatched": None}
    keys = set(set_by_launch) | {k for k in env if k.startswith(RECORDED_PREFIXES)}
    read_back = {k: env.get(k) for k in sorted(keys)}
    mismatched = sorted(k for k, v in set_by_launch.items() if env.get(k) != v)
    return {"set": dict(set_by_launch), "read_back": read_back, "mismatched": mismatched}


def _request(url: str, body: dict | None = None, timeout_s: float = 30.0) -> Any:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"} if data else {}
    req = urllib.request.Request(url, data=data, headers=headers)
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return json.loads(read_capped_sync(resp, url).decode("utf-8", "replace"))


def server_version(url: str) -> str | None:
    """vLLM's (and the sim's) /version, else llama-server's build from /props; None if neither."""
    for path, key in (("/version", "version"), ("/props", "build_info")):
        try:
            value = _request(url + path, timeout_s=5.0).get(key)
        except (OSError, ValueError, AttributeError, urllib.error.URLError):
            continue
        if value:
            return str(value)
    return None


def first_token(url: str, model: str, max_tokens: int = 1, timeout_s: float = 120.0) -> int:
    """Generates `max_tokens` tokens (one: readiness; more: a warm-up that is not measured);
    returns the completion tokens the server counted. Raises OSError (urllib's errors) when the
    server cannot serve it."""
    body = {"model": model, "prompt": "hello", "max_tokens": max_tokens, "ignore_eos": True}
    reply = _request(url + "/v1/completions", body, timeout_s)
    return int((reply.get("usage") or {}).get("completion_tokens") or 0)
