"""The KV pool: fixed-size blocks, reference counts, and prefix caching by chained block hashes.

Modelled on vLLM v1's BlockPool / KVCacheManager (vllm/v1/core/block_pool.py,
kv_cache_manager.py, kv_cache_utils.py):
- A block holds `block_size` tokens. A request holds ceil(tokens computed / block_size) blocks,
  allocated as its tokens are scheduled (prefill chunks, each decode or draft token).
- A full block of computed tokens is registered under hash(parent hash, its token ids, extra
  keys); the chain makes a block's hash depend on everything before it. The request's
  `cache_salt` is the extra key of its first block, so a salt changes every hash.
- Freed blocks keep their hash and go to the tail of an LRU free queue, last block of a request
  first (vLLM frees in reverse so a prefix's tail is evicted before its head). Allocation takes
  from the head of the queue and evicts the hash of whatever it takes.
- A lookup returns the longest chain of cached full blocks, never the whole prompt: at most
  (num_tokens - 1) // block_size blocks, since the last token must be computed to sample the
  next one. With an EAGLE-style drafter vLLM drops the last matched block as well
  (`drop_last_hit_block`), which is the seed's "reuse is (blocks - 1) x B".
- `cache_dead` is the seed's cache-dead boot: blocks are still registered, lookups never hit.

Hashes are blake2b digests (stable across processes, unlike hash()).
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Sequence


def block_hashes(
    token_ids: Sequence[int], block_size: int, known: list[bytes], salt: str | None
) -> list[bytes]:
    """Extend `known` (hashes of the first len(known) blocks) to every full block of token_ids."""
    start = len(known)
    full = len(token_ids) // block_size
    if full <= start:
        return known
    data = array("I", token_ids[start * block_size : full * block_size]).tobytes()
    width = block_size * 4
    parent = known[-1] if known else (salt or "").encode()
    for j in range(full - start):
        parent = hashlib.blake2b(
            parent + data[j * width : (j + 1) * width], digest_size=16
        ).digest()
        known.append(parent)
    return known


class BlockPool:
    """Blocks, their reference counts, the LRU free queue and the hash -> block map."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(
                f"need num_blocks >= 1 and block_size >= 1, got {num_blocks}, {block_size}"
            )
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._ref = [0] * num_blocks
        self._hash: list[bytes | None] = [None] * num_blocks
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self._cached: dict[bytes, int] = {}
        self.num_evictions = 0

    @property
    def num_free(self) -> int:
        """Blocks no request references (cached-but-unreferenced ones included, as vLLM)."""
        return len(self._free)

    @property
    def usage(self) -> float:
        return 1.0 - len(self._free) / self.num_blocks

    @property
    def num_cached(self) -> int:
        return len(self._cached)

    def lookup(self, hashes: Sequence[bytes]) -> list[int]:
        """The blocks holding the longest cached prefix of `hashes`."""
        hits = []
        for h in hashes:
            block = self._cached.get(h)
            if block is None:
                break
            hits.append(block)
        return hits

    def num_available(self, touching: Sequence[int]) -> int:
        """Free blocks left for new allocation once `touching` (cache hits) are referenced."""
        return len(self._free) - sum(1 for b in touching if self._ref[b] == 0)

    def touch(self, blocks: Sequence[int]) -> None:
        for b in blocks:
            if self._ref[b] == 0:
                del self._free[b]
            self._ref[b] += 1

    def allocate(self, n: int) -> list[int]:
        if n > len(self._free):
            raise RuntimeError(f"allocating {n} blocks with {len(self._free)} free")
        out = []
        for _ in range(n):
            b, _ = self._free.popitem(last=False)
            h = self._hash[b]
            if h is not None:
                self._hash[b] = None
                if self._cached.get(h) == b:
                    del self._cached[h]
                    self.num_evictions += 1
            self._ref[b] = 1
            out.append(b)
        return out

    def free(self, blocks: Sequence[int]) -> None:
        for b in reversed(blocks):
            self._ref[b] -= 1
            if self._ref[b] == 0:
                self._free[b] = None

    def register(self, block: int, h: bytes) -> None:
        """Make a full block findable by its hash (the first block computed with it wins)."""
        if self._hash[block] is None and h not in self._cached:
            self._hash[block] = h
            self._cached[h] = block


class KVCacheManager:
    """Per-request block tables over one BlockPool, with prefix-cache lookups and statistics."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        enable_caching: bool = True,
        cache_dead: bool = False,
        drop_last_hit_block: bool = False,
    ) -> None:
        self.pool = BlockPool(num_blocks, block_size)
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.cache_dead = cache_dead
        self.drop_last_hit_block = drop_last_hit_block
        self._tables: dict[str, list[int]] = {}
        self._registered: dict[str, int] = {}

    @property
    def usage(self) -> float:
        return self.pool.usage

    def num_blocks_used(self) -> int:
        return self.pool.num_blocks - self.pool.num_free

    def blocks_of(self, req_id: str) -> list[int]:
        return self._tables.get(req_id, [])

    def computed_blocks(self, hashes: Sequence[bytes], num_tokens: int) -> list[int]:
        """Cached blocks a request of `num_tokens` tokens (hashes of its full blocks) can reuse."""
        if not self.enable_caching or self.cache_dead:
            return []
        hits = self.pool.lookup(hashes[: (num_tokens - 1) // self.block_size])
        if self.drop_last_hit_block and hits:
            hits.pop()
        return hits

    def allocate(self, req_id: str, num_tokens: int, hits: Sequence[int] = ()) -> bool:
        """Make the request hold blocks for `num_tokens` tokens (starting from `hits` when it has
        no blocks yet). False, with nothing changed, when the pool cannot provide them."""
        table = self._tables.get(req_id)
        held = len(table) if table is not None else len(hits)
        need = -(-num_tokens // self.block_size) - held
        if need <= 0 and table is not None:
            return True
        if need > self.pool.num_available(() if table is not None else hits):
            return False
        if table is None:
            self.pool.touch(hits)
            table = self._tables[req_id] = list(hits)
            self._registered[req_id] = len(hits)
        if need > 0:
            table.extend(self.pool.allocate(need))
        return True

    def cache_full_blocks(self, req_id: str, hashes: Sequence[bytes], num_full: int) -> None:
        """Register the request's blocks [already registered, num_full) under their hashes."""
        if not self.enable_caching:
            return
        done = self._registered.get(req_id, 0)
        table = self._tables[req_id]
        for j in range(done, min(num_full, len(table))):
            self.pool.register(table[j], hashes[j])
        self._registered[req_id] = max(done, min(num_full, len(table)))

    def free(self, req_id: str) -> None:
        table = self._tables.pop(req_id, None)
        self._registered.pop(req_id, None)
        if table:
            self.pool.free(table)
