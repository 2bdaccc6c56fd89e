"""Prompts sized concurrently (engine/materialize.py materialize_all) are the prompts sized one
at a time: the same texts and counts in the same order, each shared prefix fitted once and a
trace's block words learned once, whatever order the counter's answers come back in."""

from __future__ import annotations

import asyncio
import math
import random
import re
from pathlib import Path

import pytest

from loadgen.engine.materialize import (
    SIZED_BETWEEN_TURNS,
    SIZING_IN_FLIGHT,
    materialize,
    materialize_all,
)
from loadgen.scenario.load import load_scenario
from loadgen.scenario.model import Group, PromptConfig, Scenario
from loadgen.scenario.plan import PlannedRequest, plan
from loadgen.scenario.prompts import EstimateCounter, PromptBuilder, salt_tag
from loadgen.scenario.token_counter import PromptSizeError

from support.loop_turns import LoopTurns
from support.traces import SHARED, write_scenario

_WORD = re.compile(r"\w+|[^\w\s]")


class RoundTripCounter:
    """An exact counter (a word of n letters is ceil(n / 3) tokens) whose answers come back
    after a seeded-random number of loop turns, as a server's /tokenize answers out of order;
    it keeps every text it was asked to count. `bos`: tokens the server adds to any text;
    `plateaus`: count characters as the estimate does, so some words add no token."""

    method = "tokenize"

    def __init__(self, seed: int, bos: int = 0, *, plateaus: bool = False) -> None:
        self._rng = random.Random(seed)
        self._bos = bos
        self._plateaus = plateaus
        self.asked: list[str] = []

    async def count(self, text: str) -> int:
        self.asked.append(text)
        for _ in range(self._rng.randrange(4)):
            await asyncio.sleep(0)
        if self._plateaus:
            # A character in 3 to 6 by the salt's first letter: densities differ by prompt.
            return math.ceil(len(text) / (3 + ord(text[0]) % 4))
        return self._bos + sum(math.ceil(len(t) / 3) for t in _WORD.findall(text))


def requests_of(*groups: Group) -> list[PlannedRequest]:
    (rep,) = plan(Scenario(name="t", seed=5, groups=groups)).arms[0].reps
    return list(rep.requests)


async def one_at_a_time(reqs: list[PlannedRequest], counter: RoundTripCounter) -> list:
    builder = PromptBuilder(counter)
    return [await materialize(r, builder, model="m", t_intended_ns=0) for r in reqs]


def sent(built: list) -> list[tuple[str, int, str]]:
    return [(r.id, r.prompt_tokens_sent, r.prompt) for r in built]


async def test_concurrent_sizing_builds_the_prompts_one_at_a_time_would() -> None:
    reqs = requests_of(
        Group("salted", 3 * SIZING_IN_FLIGHT, PromptConfig(300, "prose", "salted"), 4),
        Group("code", 20, PromptConfig(257, "code", "salted"), 4),
        Group("shared", 40, PromptConfig(700, "prose", "shared", 500), 4),
    )
    serial = await one_at_a_time(reqs, RoundTripCounter(1))
    counter = RoundTripCounter(2)
    both = await materialize_all(reqs, PromptBuilder(counter), model="m")
    assert sent(both) == sent(serial)
    assert [r.prompt_tokens_sent for r in both] == [r.prompt.tokens for r in reqs]
    # The shared prefix is fitted once: its fit opens by counting the bare salt tag, which no
    # other build of those streams counts (their tails are fitted after the whole prefix).
    shared_salt = next(r.prompt.salt for r in reqs if r.group == "shared")
    assert counter.asked.count(salt_tag(shared_salt)) == 1


async def test_where_words_may_add_no_token_the_answers_order_changes_no_text() -> None:
    # There a cut depends on where the search starts, so on the density a prompt starts from:
    # held for the call, it is the same for every prompt whichever answers came first.
    reqs = requests_of(
        Group("salted", 3 * SIZING_IN_FLIGHT, PromptConfig(90, "prose", "salted"), 4)
    )
    runs = []
    for seed in (7, 8, 9):
        builder = PromptBuilder(RoundTripCounter(seed, plateaus=True))
        runs.append(sent(await materialize_all(reqs, builder, model="m")))
    assert runs[0] == runs[1] == runs[2]
    assert {tokens for _, tokens, _ in runs[0]} == {90}


async def test_a_traces_block_words_are_learned_once(tmp_path: Path) -> None:
    reqs = list(plan(load_scenario(write_scenario(tmp_path, SHARED)), run_seed=11).requests())
    serial = await one_at_a_time(reqs, RoundTripCounter(4))
    counter = RoundTripCounter(5)
    both = await materialize_all(reqs, PromptBuilder(counter), model="m")
    assert sent(both) == sent(serial)
    assert counter.asked.count(" the the") == 1  # the BOS probe opens the one learning pass


async def test_a_prompt_that_cannot_be_sized_stops_the_others() -> None:
    reqs = requests_of(
        Group("fits", 2 * SIZING_IN_FLIGHT, PromptConfig(300, "prose", "salted"), 4),
        Group("tiny", 1, PromptConfig(1, "prose", "salted"), 4),
    )
    counter = RoundTripCounter(6, bos=1)  # no salt word fits in one token beside a BOS
    with pytest.raises(PromptSizeError, match="1 tokens requested but the fixed start alone"):
        await materialize_all(reqs, PromptBuilder(counter), model="m")
    asked = len(counter.asked)
    await asyncio.sleep(0.01)  # the other sizers were cancelled, not left counting
    assert len(counter.asked) == asked


async def test_a_counter_that_never_waits_still_lets_the_loop_turn() -> None:
    # The estimate answers without waiting: sizing a big rep must not hold the loop (Ctrl-C,
    # the /metrics poller) until the last prompt.
    n = 8 * SIZED_BETWEEN_TURNS
    reqs = requests_of(Group("salted", n, PromptConfig(16, "prose", "salted"), 4))
    async with LoopTurns() as turns:
        started = turns.count
        built = await materialize_all(reqs, PromptBuilder(EstimateCounter()), model="m")
        sizing_turns = turns.count - started
    assert len(built) == n
    assert sizing_turns >= n // SIZED_BETWEEN_TURNS - 1
