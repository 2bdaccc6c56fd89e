"""Secrets kept out of everything loadgen writes or prints (issue 20): a URL's userinfo and its
credential query parameters, environment variables and `--flag value` pairs whose names look
like secrets. One module, so run.json, summary.json, the reports and stdout agree."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

REDACTED = "***"

# Name parts (split at _, - and .) that mark a secret. Whole parts only, so
# `max_num_batched_tokens` (part "tokens", a count) and `KEYBOARD` (part "keyboard") are not
# secrets while `HF_TOKEN`, `api-key` and `GOOGLE_APPLICATION_CREDENTIALS` are.
SECRET_PARTS = frozenset(
    {"token", "key", "secret", "password", "passwd", "auth", "credential", "credentials"}
)
# A last part that says a name describes where a count came from (`token_source`,
# `output_token_source`, `token_counter` in summary.json), never a credential: masked, the
# report's "tokens from usage" read "tokens from ***".
PROVENANCE_PARTS = frozenset({"source", "counter"})
# Query parameters that carry a credential (AWS/Azure signed URLs use sig, key, token).
SECRET_PARAMS = frozenset({"key", "token", "secret", "password", "auth", "sig", "api_key"})

_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>]+")


# Cached: summary.json asks of the same few hundred keys 6M times at 20,000 streams, which took
# 35 s of the 68 s write_summary spent redacting (cProfile, bench/trace_scale.yaml).
@functools.lru_cache(maxsize=4096)
def is_secret_name(name: str) -> bool:
    """Whether an environment variable or flag name looks like it holds a secret."""
    parts = [p for p in re.split(r"[_\-.]+", name.lower().lstrip("-")) if p]
    if parts and parts[-1] in PROVENANCE_PARTS:
        return False
    return any(p in SECRET_PARTS for p in parts)


def redact_url(url: str) -> str:
    """The URL without its userinfo's password and with credential query values masked."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        return url
    netloc = parts.netloc
    if "@" in netloc:
        user = parts.username or ""
        port = f":{parts.port}" if _port(parts) else ""
        netloc = f"{user}:{REDACTED}@{host or ''}{port}" if user else f"{host or ''}{port}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(_secret_param(k) for k, _ in pairs):
            masked = [(k, REDACTED if _secret_param(k) else v) for k, v in pairs]
            query = urlencode(masked, safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _port(parts: Any) -> int | None:
    try:
        return parts.port
    except ValueError:
        return None


def _secret_param(name: str) -> bool:
    return name.lower() in SECRET_PARAMS or is_secret_name(name)


def redact_text(text: str) -> str:
    """Every URL inside free text redacted (log lines, error messages, report text)."""
    return _URL.sub(lambda m: redact_url(m.group(0)), text)


def redact_env(env: Mapping[str, Any]) -> dict[str, Any]:
    """An environment with the values of secret-named variables masked."""
    return {k: (REDACTED if is_secret_name(k) and v else redact(v)) for k, v in env.items()}


def redact_argv(argv: Sequence[Any]) -> list[Any]:
    """An argv with the value of each secret-named flag masked (`--api-key X`, `--token=X`)."""
    out: list[Any] = []
    mask_next = False
    for arg in argv:
        if mask_next and isinstance(arg, str):
            out.append(REDACTED)
            mask_next = False
            continue
        mask_next = False
        if isinstance(arg, str) and arg.startswith("-"):
            name, eq, _ = arg.partition("=")
            if is_secret_name(name):
                out.append(f"{name}={REDACTED}" if eq else arg)
                mask_next = not eq
                continue
        out.append(redact(arg))
    return out


def redact(obj: Any) -> Any:
    """A JSON-like value with every secret it holds masked: secret-named keys' values, URLs in
    strings, secret flags' values in string lists. A dict or list that holds no secret is
    returned as it is, not copied: a million streams' summary was held twice while written."""
    if isinstance(obj, str):
        return redact_text(obj) if "://" in obj else obj
    # Numbers and dicts first: most of summary.json, where the Mapping ABC's check alone cost
    # 2.4 s of a 20,000-stream summary.
    if obj is None or isinstance(obj, int | float):
        return obj
    if isinstance(obj, dict):
        return _redact_dict(obj)
    if isinstance(obj, Mapping):
        return {k: _redact_item(k, v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        out = redact_argv(obj) if any(isinstance(a, str) for a in obj) else [redact(a) for a in obj]
        return obj if all(a is b for a, b in zip(out, obj, strict=True)) else out
    return obj


def _redact_dict(d: dict[Any, Any]) -> dict[Any, Any]:
    """d itself when no value changed, else a copy with the changed values."""
    copy: dict[Any, Any] | None = None
    for k, v in d.items():
        masked = _redact_item(k, v)
        if masked is not v:
            if copy is None:
                copy = dict(d)
            copy[k] = masked
    return d if copy is None else copy


def _redact_item(key: Any, value: Any) -> Any:
    if isinstance(key, str) and is_secret_name(key) and isinstance(value, str) and value:
        return REDACTED
    return redact(value)
