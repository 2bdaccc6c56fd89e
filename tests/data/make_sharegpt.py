"""Writes scenarios/data/sharegpt_small.json, the project's own ShareGPT-format fixture: 60
conversations of varied length (a one-line question to a page of pasted notes), 18 of them
multi-turn, some with a system turn and some spelled `from: user/assistant`, as real exports
are. The text is composed here from hand-written pieces with a fixed seed: no download, byte-stable.

Run `python tests/data/make_sharegpt.py` to rewrite the file; tests/scenario/test_datasets.py
holds the committed file equal to this script's output.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

# Beside the shipped scenario that replays it (scenarios/sharegpt.yaml): a dataset's text is
# sent to the server, so it must lie in the scenario's folder unless --allow-files-outside.
OUT = Path(__file__).parents[2] / "scenarios" / "data" / "sharegpt_small.json"
CONVERSATIONS = 60
MULTI_TURN_EVERY = 10  # rows 0, 10, ... and the others below are multi-turn
MULTI_TURN_EXTRA = (3, 7, 13, 17, 23, 27, 33, 37, 43, 47, 53, 57)

TOPICS = (
    "sourdough starter",
    "a leaking kitchen tap",
    "Python's asyncio event loop",
    "the French Revolution",
    "compound interest",
    "a bicycle chain that skips",
    "photosynthesis",
    "a job interview for a nurse",
    "TCP slow start",
    "learning the cello",
    "a wedding toast",
    "the Krebs cycle",
    "rust on a cast iron pan",
    "SQL window functions",
    "a cover letter",
    "tides and the moon",
    "a cat that will not eat",
    "Kubernetes pods",
    "the rules of cricket",
    "a vegetable garden in clay soil",
    "binary search",
    "the Roman aqueducts",
    "a noisy upstairs neighbour",
    "public speaking nerves",
)
ASKS = (
    "Can you explain {t} to me?",
    "What is the simplest way to think about {t}?",
    "I keep getting confused by {t}. Where should I start?",
    "Write a short guide about {t} for a beginner.",
    "What are the most common mistakes people make with {t}?",
    "Give me three facts about {t} that most people do not know.",
    "How would you summarise {t} in one paragraph?",
    "My friend says {t} is easy. Is that true?",
)
FOLLOW_UPS = (
    "Thanks. Can you make that shorter?",
    "What would you do first, step by step?",
    "Can you give an example?",
    "Why does that happen?",
    "And what if that does not work?",
    "Could you put that in a table?",
    "How long does it usually take?",
)
SENTENCES = (
    "The short answer is that it depends on a few things you can check yourself.",
    "Start with the part you can see, and only then move to the parts you cannot.",
    "Most of the trouble comes from doing two steps at once instead of one after the other.",
    "A good rule of thumb is to change one thing, wait, and watch what happens.",
    "People often skip the boring preparation, and that is where the problems begin.",
    "If you write down what you tried, you will find the pattern much sooner.",
    "There is no single right way, but some ways waste far less time than others.",
    "The first attempt rarely works perfectly, and that is normal.",
    "It helps to know why each step matters, not only what the step is.",
    "Keep the setup simple until the simple version works every time.",
    "Measure before and after; a feeling of progress is not the same as progress.",
    "When in doubt, ask someone who has done it a hundred times.",
    "The details matter less than the habit of checking them.",
    "Expect the second week to feel harder than the first, then easier.",
)
NOTES = (
    "Here are my notes so far:",
    "I pasted what I have below.",
    "This is the draft I wrote last night:",
)


def _answer(r: random.Random, topic: str, sentences: int) -> str:
    parts = [f"Here is how I would approach {topic}."]
    for k in range(sentences):
        parts.append(r.choice(SENTENCES))
        if k % 6 == 5:
            parts.append(f"\n\n{k // 6 + 1}. On {topic} specifically:")
    return " ".join(parts)


def _question(r: random.Random, topic: str, i: int) -> str:
    ask = r.choice(ASKS).format(t=topic)
    if i % 5 == 4:  # a long prompt: the user pastes notes of their own
        notes = " ".join(r.choice(SENTENCES) for _ in range(r.randint(20, 90)))
        return f"{ask} {r.choice(NOTES)}\n\n{notes}"
    return ask


def conversation(i: int) -> dict:
    r = random.Random(1000 + i)
    topic = TOPICS[i % len(TOPICS)]
    spelled_user = i % 4 == 1
    user, answer = ("user", "assistant") if spelled_user else ("human", "gpt")
    turns = []
    if i % 9 == 2:
        turns.append({"from": "system", "value": "You are a patient, practical helper."})
    exchanges = r.randint(2, 4) if i % MULTI_TURN_EVERY == 0 or i in MULTI_TURN_EXTRA else 1
    for k in range(exchanges):
        text = _question(r, topic, i) if k == 0 else r.choice(FOLLOW_UPS)
        turns.append({"from": user, "value": text})
        size = r.choice((2, 4, 8, 16, 32, 60)) if k == 0 else r.randint(2, 12)
        turns.append({"from": answer, "value": _answer(r, topic, size)})
    return {"id": f"fixture_{i:03d}", "conversations": turns}


def fixture_text() -> str:
    rows = [conversation(i) for i in range(CONVERSATIONS)]
    return json.dumps(rows, indent=1, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    OUT.write_text(fixture_text(), encoding="utf-8")
