"""Item 14 of issue #10, the analysis half: which salted streams came back from cache."""

from __future__ import annotations

import dataclasses

from loadgen.analysis.inputs import RunInputs
from loadgen.analysis.summary import analyze
from loadgen.analysis.timeline import Timeline
from loadgen.analysis.warmth import cache_warmth, salted_groups
from loadgen.report.text import render_plain

from support.run_fixtures import manifest, ns, sample, stream, ticks

GROUPS = [
    {"name": "g", "prompt": {"cache": "salted"}},
    {"name": "p", "prompt": {"cache": "primed"}},
]


def test_salted_groups_come_from_the_resolved_scenario():
    assert salted_groups(manifest(scenario={"name": "t", "groups": GROUPS})) == {"g"}


def test_usage_witness_and_its_threshold():
    salted = frozenset({"g"})
    warm = stream("w", prompt=1000, cached=992, chunks=ticks(0.05, 3, 0.01))
    stray = stream("s", prompt=1000, cached=32, chunks=ticks(0.05, 3, 0.01))
    primed = stream("p", group="p", prompt=1000, cached=992, chunks=ticks(0.05, 3, 0.01))
    tl = Timeline([])
    assert cache_warmth(warm, tl, salted, counter_usable=True) == {
        "source": "usage",
        "cached_tokens": 992,
        "prompt_tokens": 1000,
        "reason": "salted prompt, yet 992 of its 1000 prompt tokens came from the prefix cache "
        "(usage cached_tokens): its TTFT is a cache hit",
    }
    # A block or two of shared template is no warm prompt; a primed group is meant to hit.
    assert cache_warmth(stray, tl, salted, counter_usable=True) is None
    assert cache_warmth(primed, tl, salted, counter_usable=True) is None


def test_counter_witness_only_when_every_group_is_salted():
    rec = stream("w", prompt=1000, sent=1.0, chunks=ticks(1.05, 3, 0.01))
    tl = Timeline([sample(0.9, hits=100), sample(1.2, hits=1092)])
    found = cache_warmth(rec, tl, frozenset({"g"}), counter_usable=True)
    assert found is not None
    assert (found["source"], found["hits_delta"]) == ("prefix_hits_counter", 992.0)
    assert cache_warmth(rec, tl, frozenset({"g"}), counter_usable=False) is None


def test_a_poll_asked_before_the_first_token_does_not_close_its_window():
    # First token at 1.08 s. The poll answered at 1.1 s was asked at 1.07 s: the server may
    # have rendered it before the hit (seen on vLLM's CPU build, where it held the old count),
    # so the window runs to the poll asked after the token, which holds the hit.
    rec = stream("w", prompt=1000, sent=1.0, chunks=ticks(1.08, 3, 0.01))
    early = dataclasses.replace(sample(1.1, hits=100), t_asked_ns=ns(1.07))
    polls = [sample(0.9, hits=100), early, sample(1.3, hits=1092)]
    found = cache_warmth(rec, Timeline(polls), frozenset({"g"}), counter_usable=True)
    assert found is not None and found["hits_delta"] == 992.0
    # Asked after the token, the same poll closes the window, and holds no hit: cold.
    after = dataclasses.replace(early, t_asked_ns=ns(1.09))
    polls = [sample(0.9, hits=100), after, sample(1.3, hits=1092)]
    assert cache_warmth(rec, Timeline(polls), frozenset({"g"}), counter_usable=True) is None


def test_the_report_warns_in_one_line():
    run = manifest(scenario={"name": "t", "groups": GROUPS[:1]})
    recs = [stream(f"s{i}", sent=i, prompt=1000, cached=c, chunks=ticks(i + 0.05, 3, 0.01))
            for i, c in enumerate([0, 992, 992])]  # fmt: skip
    text = render_plain(analyze(RunInputs(run, recs, [])).summary)
    assert (
        "!! WARM CACHE: 2 of 3 measured streams meant to be cold (salted) were served from the "
        "prefix cache (usage): a replayed seed on a server that kept an earlier run's cache? "
        "their TTFTs are cache hits"
    ) in text.splitlines()
