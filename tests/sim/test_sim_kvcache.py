"""The KV pool: chained hashes, LRU eviction, reference counts, full-block-only reuse."""

import pytest

from loadgen.sim.kvcache import BlockPool, KVCacheManager, block_hashes

B = 4


def hashes(tokens: list[int], salt: str | None = None) -> list[bytes]:
    return block_hashes(tokens, B, [], salt)


def test_only_full_blocks_are_hashed() -> None:
    assert len(hashes(list(range(11)))) == 2
    assert hashes([1, 2, 3]) == []


def test_hashes_chain_and_extend_incrementally() -> None:
    tokens = list(range(12))
    known = hashes(tokens[:8])
    assert block_hashes(tokens, B, known, None) == hashes(tokens)
    changed = hashes([99, *tokens[1:]])
    assert all(a != b for a, b in zip(changed, hashes(tokens), strict=True))


def test_salt_changes_every_hash() -> None:
    tokens = list(range(12))
    plain, salted = hashes(tokens), hashes(tokens, "s1")
    assert all(a != b for a, b in zip(plain, salted, strict=True))
    assert hashes(tokens, "s1") == salted


def test_lookup_never_covers_the_whole_prompt() -> None:
    kv = KVCacheManager(16, B)
    tokens = list(range(8))  # exactly two blocks
    h = hashes(tokens)
    assert kv.allocate("a", 8)
    kv.cache_full_blocks("a", h, 2)
    kv.free("a")
    assert len(kv.computed_blocks(h, 8)) == 1  # the last token must be recomputed
    assert len(kv.computed_blocks(h + hashes(list(range(8, 12))), 12)) == 2


def test_a_prompt_smaller_than_a_block_reuses_nothing() -> None:
    kv = KVCacheManager(16, B)
    tokens = [5, 6, 7]
    assert kv.allocate("a", 3)
    kv.cache_full_blocks("a", hashes(tokens), 0)
    kv.free("a")
    assert kv.computed_blocks(hashes(tokens), 3) == []
    assert kv.pool.num_cached == 0


def test_drafter_drops_the_last_hit_block() -> None:
    kv = KVCacheManager(16, B, drop_last_hit_block=True)
    tokens = list(range(17))
    h = hashes(tokens)
    assert kv.allocate("a", 17)
    kv.cache_full_blocks("a", h, 4)
    kv.free("a")
    assert len(kv.computed_blocks(h, 17)) == 3  # (blocks - 1)


def test_cache_dead_never_hits() -> None:
    kv = KVCacheManager(16, B, cache_dead=True)
    h = hashes(list(range(16)))
    assert kv.allocate("a", 16)
    kv.cache_full_blocks("a", h, 4)
    kv.free("a")
    assert kv.pool.num_cached == 4
    assert kv.computed_blocks(h, 16) == []


def test_allocation_fails_without_side_effects() -> None:
    kv = KVCacheManager(4, B)
    assert kv.allocate("a", 12)
    assert not kv.allocate("b", 8)
    assert kv.blocks_of("b") == []
    assert kv.num_blocks_used() == 3
    assert kv.allocate("b", 4)
    assert kv.usage == 1.0
    assert not kv.allocate("a", 13)
    assert len(kv.blocks_of("a")) == 3


def test_shared_hit_blocks_are_reference_counted() -> None:
    kv = KVCacheManager(8, B)
    tokens = list(range(9))
    h = hashes(tokens)
    assert kv.allocate("a", 9)
    kv.cache_full_blocks("a", h, 2)
    hits = kv.computed_blocks(h, 9)
    assert hits == kv.blocks_of("a")[:2]
    assert kv.allocate("b", 9, hits)
    assert kv.num_blocks_used() == 4  # a: 3 blocks, b: the two shared + one of its own
    kv.free("a")
    assert kv.num_blocks_used() == 3
    kv.free("b")
    assert kv.num_blocks_used() == 0


def test_hits_on_free_blocks_count_against_availability() -> None:
    kv = KVCacheManager(3, B)
    h = hashes(list(range(9)))
    assert kv.allocate("a", 9)
    kv.cache_full_blocks("a", h, 2)
    kv.free("a")
    hits = kv.computed_blocks(h, 9)
    assert len(hits) == 2
    assert kv.pool.num_available(hits) == 1
    assert not kv.allocate("b", 16, hits)  # needs 2 more blocks, only 1 is not a hit
    assert kv.allocate("b", 12, hits)


def test_lru_evicts_least_recently_freed_and_a_prefix_tail_first() -> None:
    pool = BlockPool(4, B)
    first = pool.allocate(2)
    pool.register(first[0], b"h0")
    pool.register(first[1], b"h1")
    pool.free(first)  # freed tail first: first[1] is now the oldest free block
    second = pool.allocate(2)
    assert pool.lookup([b"h0"]) == [first[0]]
    pool.free(second)
    taken = pool.allocate(3)
    assert taken[0] == first[1]
    assert pool.lookup([b"h0", b"h1"]) == []  # h1 evicted, so the chain breaks at its start
    assert pool.num_evictions == 2
    assert pool.lookup([b"h0"]) == []


def test_register_keeps_the_first_block_for_a_hash() -> None:
    pool = BlockPool(2, B)
    a, b = pool.allocate(2)
    pool.register(a, b"x")
    pool.register(b, b"x")
    assert pool.lookup([b"x"]) == [a]


def test_pool_rejects_nonsense_sizes() -> None:
    with pytest.raises(ValueError, match="num_blocks"):
        BlockPool(0, 16)
