"""Which replica a request goes to: the client-side router in front of several servers.

A pure policy beside the scheduler: it sees each request as the plan made it (its prompt or
messages, its session) and the streams it has in flight per replica, never a socket, so the
wall clock's HTTP backend and the virtual clock's fleet of sim engines route alike. Replicas
are indices into the run's target list (run.json `targets`); a record's `replica` names one.

Policies (`--route`):
- `round-robin`: the i-th request routed goes to replica i mod N;
- `least-outstanding`: the replica with the fewest streams in flight (ties: the lowest index);
- `session-affinity`: every turn of a session to the replica its first turn got (first turns
  and requests outside sessions round-robin among themselves);
- `prefix-hash`: the first K blocks of B characters of the prompt text (a chat request's
  messages' contents in order), hashed (blake2b, stable across processes), mod N; a prompt
  shorter than K blocks hashes its whole full blocks (a shorter prompt: all of it). The client
  does not tokenize, so a block is characters, as the approximate prefix scorer of llm-d's
  inference scheduler hashes them; requests sharing the first K x B characters share a replica.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass
from enum import StrEnum

from loadgen.request import StreamRequest


class RoutePolicy(StrEnum):
    ROUND_ROBIN = "round-robin"
    LEAST_OUTSTANDING = "least-outstanding"
    SESSION_AFFINITY = "session-affinity"
    PREFIX_HASH = "prefix-hash"


# 4 blocks of 256 characters: 1,024 characters, about 340 tokens of the sim's prose (a 512-token
# Mooncake block was 1,554 characters on its tokenizer): past a short shared system prompt, so
# a chat's own head decides the replica. A longer shared head needs a longer key: the options.
DEFAULT_PREFIX_BLOCKS = 4
DEFAULT_BLOCK_CHARS = 256


@dataclass(frozen=True, slots=True)
class RouteSpec:
    """A routing policy and its prefix-hash settings, as run.json's `targets` records them."""

    policy: RoutePolicy = RoutePolicy.ROUND_ROBIN
    prefix_blocks: int = DEFAULT_PREFIX_BLOCKS
    block_chars: int = DEFAULT_BLOCK_CHARS


def prefix_text(req: StreamRequest, limit: int) -> str:
    """The first `limit` characters a prefix router hashes: the prompt, or a chat request's
    message contents concatenated in order (roles and templates are the same for all)."""
    if req.messages is None:
        return req.prompt[:limit]
    parts: list[str] = []
    size = 0
    for message in req.messages:
        content = str(message.get("content") or "")
        parts.append(content)
        size += len(content)
        if size >= limit:
            break
    return "".join(parts)[:limit]


def prefix_replica(req: StreamRequest, replicas: int, blocks: int, block_chars: int) -> int:
    """The replica `prefix-hash` gives `req`: its first whole blocks (at most `blocks`),
    hashed, mod `replicas`."""
    text = prefix_text(req, blocks * block_chars)
    whole = len(text) - len(text) % block_chars
    key = text[:whole] if whole else text
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % replicas


class Router:
    """One run's routing state: picks a replica per request and hears when its stream ends."""

    def __init__(self, spec: RouteSpec, replicas: int) -> None:
        if replicas < 1:
            raise ValueError("a router needs at least one replica")
        self.spec = spec
        self.replicas = replicas
        self.in_flight = [0] * replicas
        self._turns = itertools.count()
        self._sessions: dict[str, int] = {}

    def pick(self, req: StreamRequest) -> int:
        """The replica for `req`, counted in flight there until `done` is called for it."""
        replica = self._choose(req)
        self.in_flight[replica] += 1
        return replica

    def done(self, replica: int) -> None:
        self.in_flight[replica] -= 1

    def _choose(self, req: StreamRequest) -> int:
        policy, n = self.spec.policy, self.replicas
        if policy == RoutePolicy.LEAST_OUTSTANDING:
            return min(range(n), key=lambda i: (self.in_flight[i], i))
        if policy == RoutePolicy.PREFIX_HASH:
            return prefix_replica(req, n, self.spec.prefix_blocks, self.spec.block_chars)
        if policy == RoutePolicy.SESSION_AFFINITY and req.session is not None:
            if req.session not in self._sessions:
                self._sessions[req.session] = next(self._turns) % n
            return self._sessions[req.session]
        return next(self._turns) % n
