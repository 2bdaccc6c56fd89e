"""Several replicas' /metrics as one server's (engine/replicas.py): counters summed over each
replica's last good scrape, levels summed and shares averaged over the replicas answering;
each replica's own sample kept with its index; no total at all when none answered."""

from __future__ import annotations

import pytest

from loadgen.codec import to_json
from loadgen.engine.replicas import FleetScrape, fleet_values
from loadgen.records import MetricsSample, read_metrics_sample

UP0 = {"prefix_cache_hits_total": 100.0, "num_requests_running": 3.0, "kv_cache_usage_perc": 0.5}
UP1 = {"prefix_cache_hits_total": 40.0, "num_requests_running": 1.0, "kv_cache_usage_perc": 0.1}


def test_every_replica_answering_sums_counters_and_levels_and_averages_shares() -> None:
    got = fleet_values([UP0, UP1], [UP0, UP1])
    assert got == {"prefix_cache_hits_total": 140.0, "num_requests_running": 4.0,
                   "kv_cache_usage_perc": pytest.approx(0.3)}  # fmt: skip


def test_a_silent_replica_keeps_its_counters_and_drops_its_gauges() -> None:
    # Replica 1 answered 40 hits once, then died: the total must not fall by 40 (a negative
    # delta), and its last running / KV figures are no longer true.
    got = fleet_values([UP0, None], [UP0, UP1])
    assert got == {"prefix_cache_hits_total": 140.0, "num_requests_running": 3.0,
                   "kv_cache_usage_perc": 0.5}  # fmt: skip


async def test_fleet_scrape_writes_each_replica_and_answers_the_total() -> None:
    sink: list[MetricsSample] = []
    answers = {0: ["vllm:prefix_cache_hits_total 7\n"], 1: ["vllm:prefix_cache_hits_total 5\n"]}

    def fetch(i: int):
        async def get() -> str:
            if not answers[i]:
                raise ConnectionRefusedError("gone")
            return answers[i].pop(0)

        return get

    scrape = FleetScrape([fetch(0), fetch(1)], sink.append, clock=lambda: 42)
    first = await scrape()
    assert first.values == {"prefix_cache_hits_total": 12.0}
    answers[0].append("vllm:prefix_cache_hits_total 9\n")  # replica 1 has nothing left: down
    second = await scrape()
    assert second.values == {"prefix_cache_hits_total": 14.0}
    assert [(s.replica, s.values, s.error) for s in sink] == [
        (0, {"prefix_cache_hits_total": 7.0}, None),
        (1, {"prefix_cache_hits_total": 5.0}, None),
        (0, {"prefix_cache_hits_total": 9.0}, None),
        (1, {}, "ConnectionRefusedError: gone"),
    ]
    assert all(s.t_ns == 42 for s in sink)
    with pytest.raises(ConnectionRefusedError):  # none answered: the poller records the failure
        await scrape()


def test_a_replica_sample_round_trips_with_its_index_and_a_plain_one_without() -> None:
    tagged = MetricsSample(5, {"x": 1.0}, None, replica=2)
    assert to_json(tagged)["replica"] == 2
    assert read_metrics_sample(to_json(tagged)) == tagged
    plain = MetricsSample(5, {"x": 1.0})
    assert "replica" not in to_json(plain)
    assert read_metrics_sample(to_json(plain)) == plain
