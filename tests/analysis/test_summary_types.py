"""summary.json's run and groups read back as types (analysis/summary_types.py): the run's
target, counts, cap, baseline and server window, and every registered metric's statistics,
verdicts, chunk tally and cohort, exactly as summary.py wrote them."""

from __future__ import annotations

from dataclasses import fields

import pytest

from loadgen.analysis.aggregate import server_window
from loadgen.analysis.baselines import Cap, PrefillBaseline
from loadgen.analysis.inputs import RunInputs
from loadgen.analysis.registry import GAP_METRICS, names_where
from loadgen.analysis.summary import analyze
from loadgen.analysis.summary_types import (
    Cohort,
    Gauge,
    GroupStats,
    RunSummary,
    RunTarget,
    ServerWindow,
    Stats,
    any_multi_token,
    carried_other_than_one,
    read_groups,
    read_run,
    read_stats,
)
from loadgen.analysis.timeline import Plateau, Timeline
from loadgen.codec import from_json, to_json

from support.run_fixtures import manifest, sample, stream, ticks


def summary_of(records, metrics=(), **manifest_fields):
    return analyze(RunInputs(manifest(**manifest_fields), records, list(metrics))).summary


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
    assert g.cohort == from_json(Cohort, raw["cohort"]) and g.cohort.n == 3
    with pytest.raises(KeyError):
        g.of("ttfo_s")  # described only in the reasoning block


def test_a_groups_statistics_are_declared_for_every_registered_metric_in_its_order():
    # summary.py writes them from the registry; GroupStats is how they are read back.
    registered = [*names_where("group_stats"), *(m.name for m in GAP_METRICS)]
    assert [f.name for f in fields(GroupStats)] == registered


def test_multi_token_chunks_are_seen_only_where_a_chunk_carried_more_than_one():
    ones = summary_of([stream("a", chunks=ticks(0.5, 4, 0.1))])
    twos = summary_of([stream("a", chunks=ticks(0.5, 4, 0.1), tokens=[1, 2, 2, 2])])
    assert not any_multi_token(read_groups(ones))
    (g,) = read_groups(twos)
    assert g.multi_token and g.chunk_tokens.multi == 3 and g.chunk_tokens.tokens == 7
    assert not carried_other_than_one(read_stats(None))


def test_a_run_reads_back_its_target_counts_cap_and_baseline_exactly():
    facts = {"max_num_seqs": 2, "block_size": 16, "num_speculative_tokens": 3,
             "sources": {"max_num_seqs": "user", "block_size": "flags"}}  # fmt: skip
    records = [stream(f"s{i}", sent=0.0, chunks=ticks(0.5 + i, 4, 0.1)) for i in range(3)]
    summary = summary_of(records, target={"url": "http://h:1/v1", "kind": "external",
                                          "flags": ["--x", 4]}, server=facts)  # fmt: skip
    raw, run = summary["run"], read_run(summary)
    assert (run.target.url, run.target.kind, run.target.flags) == (
        "http://h:1/v1", "external", ("--x", "4"))  # fmt: skip
    assert (run.scenario, run.model, run.seed, run.clock, run.speed) == (
        "test",
        "m",
        1,
        "wall",
        1.0,
    )
    assert run.streams is not None and (run.streams.measure, run.streams.ok) == (3, 3)
    assert run.streams.by_phase == {"measure": 3}
    assert run.cap is not None and to_json(run.cap) == raw["cap"]
    assert run.prefill_baseline is not None
    assert to_json(run.prefill_baseline) == raw["prefill_baseline"]
    assert run.records is not None and (run.records.planned, run.records.measured) == (None, 3)
    # Only the facts the user stated are the user's; the speculation depth is read either way.
    facts = run.server_facts
    assert facts.user_facts == (("max_num_seqs", 2),) and facts.speculative_tokens == 3
    assert not run.client_limited and run.client_limits is not None
    assert not run.client_limits.limits_run and run.arm_client_limits == {}


def test_cap_and_baseline_round_trip_through_json():
    cap = Cap(4, "boot_log")
    base = PrefillBaseline(812.5, "uncontended_streams", ("a", "b"), {"g": 790.0}, ("c",))
    assert to_json(cap) == {"value": 4, "source": "boot_log"}
    assert to_json(base) == {"tok_s": 812.5, "source": "uncontended_streams", "streams": ["a", "b"],
                             "by_group": {"g": 790.0}, "cached_excluded": ["c"]}  # fmt: skip
    assert from_json(Cap, to_json(cap)) == cap
    assert from_json(PrefillBaseline, to_json(base)) == base


def test_a_sweep_parent_run_has_no_counts_cap_or_server_window():
    run = from_json(RunSummary, {"scenario": "s", "seed": 3, "interrupted": True,
                                "boots_per_arm": 2, "boots_note": "one per arm"})  # fmt: skip
    assert (run.streams, run.cap, run.prefill_baseline, run.records) == (None,) * 4
    assert (run.interrupted, run.boots_per_arm, run.target.url) == (True, 2, None)
    assert run.server == ServerWindow(False, "no server metrics")
    # A run whose run.json named no target wrote null: it names none, as no key does.
    assert read_run({"run": {"target": None}}).target == read_run({}).target == RunTarget()


def test_the_server_window_reads_back_its_gauges_and_ratios():
    polls = [sample(t, running=r, waiting=w, kv=kv, hits=h, queries=q, gen=g)
             for t, r, w, kv, h, q, g in ((0.0, 0, 0, 0.1, 0, 0, 0), (1.0, 2, 1, 0.4, 10, 20, 8),
                                          (2.0, 2, 1, 0.3, 30, 40, 20))]  # fmt: skip
    raw = server_window(Timeline(polls), 0, 2 * 10**9)
    srv = from_json(ServerWindow, raw)
    assert (srv.available, srv.duration_s, srv.polls, srv.poll_interval_s) == (True, 2.0, 3, 1.0)
    assert srv.kv_peak_perc == pytest.approx(40.0)
    assert srv.running == Gauge(2.0, Plateau(2.0, 1.0, 2.0, 1.0, 2))
    assert srv.waiting == Gauge(1.0, Plateau(1.0, 1.0, 2.0, 1.0, 2))
    assert srv.prefix_hit_rate == pytest.approx(0.75)
    assert srv.generation_tokens == 20 and srv.generation_tok_s == pytest.approx(10.0)
    assert srv.spec_acceptance is None and srv.tokens_per_step is None
    missing = from_json(ServerWindow, {"available": False, "note": "no measured streams"})
    assert missing == ServerWindow(False, "no measured streams")
