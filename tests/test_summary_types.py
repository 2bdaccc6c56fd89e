"""summary.json's groups read back as types (analysis/summary_types.py): every registered
metric's statistics, verdicts, chunk tally and cohort, exactly as summary.py wrote them."""

from __future__ import annotations

import pytest
from run_fixtures import manifest, stream, ticks

from loadgen.analysis.inputs import RunInputs
from loadgen.analysis.registry import GAP_METRICS, names_where
from loadgen.analysis.summary import analyze
from loadgen.analysis.summary_types import (
    Cohort,
    Stats,
    any_multi_token,
    carried_other_than_one,
    read_groups,
)


def summary_of(records):
    return analyze(RunInputs(manifest(), records, [])).summary


def test_a_group_reads_back_every_registered_statistic_exactly():
    records = [stream(f"s{i}", sent=0.0, chunks=ticks(0.5 + i, 4, 0.1)) for i in range(3)]
    summary = summary_of(records)
    (g,) = read_groups(summary)
    raw = summary["groups"]["g"]
    assert (g.name, g.n, g.ok, g.token_source) == ("g", 3, 3, "usage_continuous")
    for field in (*names_where("group_stats"), *(m.name for m in GAP_METRICS)):
        assert g.of(field) == Stats(**raw[field]), field
    assert g.of("ttft_s").median == pytest.approx(1.5)
    assert g.verdicts == raw["verdicts"]
    assert g.cohort == Cohort.from_json(raw["cohort"]) and g.cohort.n == 3
    with pytest.raises(KeyError):
        g.of("ttfo_s")  # described only in the reasoning block


def test_multi_token_chunks_are_seen_only_where_a_chunk_carried_more_than_one():
    ones = summary_of([stream("a", chunks=ticks(0.5, 4, 0.1))])
    twos = summary_of([stream("a", chunks=ticks(0.5, 4, 0.1), tokens=[1, 2, 2, 2])])
    assert not any_multi_token(read_groups(ones))
    (g,) = read_groups(twos)
    assert g.multi_token and g.chunk_tokens.multi == 3 and g.chunk_tokens.tokens == 7
    assert not carried_other_than_one(Stats.from_json(None))
