"""The client-side router's policies (client/routing.py): exact assignments for each, and the
prefix hash's key (which characters decide, and which do not)."""

import pytest

from loadgen.client.routing import RoutePolicy, Router, RouteSpec, prefix_replica, prefix_text
from loadgen.request import StreamRequest


def req(prompt: str = "p", session: str | None = None) -> StreamRequest:
    return StreamRequest(id=prompt, model="m", prompt=prompt, max_tokens=1, session=session)


def chat(*contents: str) -> StreamRequest:
    messages = tuple({"role": "user", "content": c} for c in contents)
    return StreamRequest(id="c", model="m", prompt="", max_tokens=1, messages=messages)


def test_round_robin_deals_in_turn_whatever_is_in_flight() -> None:
    router = Router(RouteSpec(RoutePolicy.ROUND_ROBIN), 3)
    got = [router.pick(req()) for _ in range(5)]
    assert got == [0, 1, 2, 0, 1]
    assert router.in_flight == [2, 2, 1]


def test_least_outstanding_takes_the_emptiest_lowest_index_first() -> None:
    router = Router(RouteSpec(RoutePolicy.LEAST_OUTSTANDING), 3)
    assert [router.pick(req()) for _ in range(4)] == [0, 1, 2, 0]  # in flight [2, 1, 1]
    router.done(0)
    router.done(0)  # [0, 1, 1]
    assert router.pick(req()) == 0
    router.done(2)  # [1, 1, 0]
    assert [router.pick(req()) for _ in range(3)] == [2, 0, 1]
    assert router.in_flight == [2, 2, 1]


def test_session_affinity_keeps_a_sessions_turns_on_its_first_replica() -> None:
    router = Router(RouteSpec(RoutePolicy.SESSION_AFFINITY), 3)
    order = [req(session="a"), req(session="b"), req(session="a"), req(), req(session="c"),
             req(session="b"), req(session="c"), req()]  # fmt: skip
    # New sessions and plain requests share one turn counter: a 0, b 1, plain 2, c 0, plain 1.
    assert [router.pick(r) for r in order] == [0, 1, 0, 2, 0, 1, 0, 1]


def test_prefix_hash_exact_replicas() -> None:
    # K = 2 blocks of 4 characters: the first 8 characters decide.
    prompts = ["alpha beta gamma", "alpha beta delta", "zeta eta theta", "iota kappa",
               "lambda mu", "abcdXY", "abcdZZ", "abcd"]  # fmt: skip
    got = [prefix_replica(req(p), 4, 2, 4) for p in prompts]
    assert got == [0, 0, 1, 3, 1, 0, 0, 0]
    router = Router(RouteSpec(RoutePolicy.PREFIX_HASH, prefix_blocks=2, block_chars=4), 4)
    assert [router.pick(req(p)) for p in prompts] == got


def test_prefix_hash_key_is_the_leading_whole_blocks() -> None:
    # Past K x B characters nothing counts; inside them every character does.
    a, b = req("alpha beta gamma"), req("alpha beXXXXXXXXX")
    assert prefix_text(a, 8) == prefix_text(b, 8) == "alpha be"
    assert prefix_replica(a, 4, 2, 4) == prefix_replica(b, 4, 2, 4)
    # K = 2 blocks of 8: 16 characters decide; a 15-character prompt has one whole block, so
    # it is hashed as its first 8 characters alone.
    assert prefix_replica(req("alpha beta gammaZ"), 4, 2, 8) == 1
    assert prefix_replica(req("alpha beta delt"), 4, 2, 8) == 0
    assert prefix_replica(req("alpha be"), 4, 2, 8) == 0
    # A prompt shorter than one block is hashed whole.
    assert (prefix_replica(req("abc"), 4, 2, 8), prefix_replica(req("abd"), 4, 2, 8)) == (0, 3)


def test_prefix_hash_reads_a_chats_message_contents_in_order() -> None:
    assert prefix_text(chat("alpha ", "beta gamma"), 12) == "alpha beta g"
    assert prefix_replica(chat("alpha ", "beta gamma"), 4, 2, 4) == prefix_replica(
        req("alpha beta gamma"), 4, 2, 4
    )


def test_a_router_needs_a_replica() -> None:
    with pytest.raises(ValueError, match="at least one replica"):
        Router(RouteSpec(), 0)
