"""Metric-name aliases onto vLLM v1's vocabulary, and scrape failures as data."""

import time

from prometheus_client.parser import text_string_to_metric_families

from loadgen import exposition
from loadgen.engine.poller import MetricsPoller
from loadgen.exposition import parse_exposition, parse_families

VLLM_V1 = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 4.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 1000.0
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_bucket{le="+Inf",model_name="m"} 7.0
vllm:iteration_tokens_total_count{model_name="m"} 7.0
vllm:iteration_tokens_total_sum{model_name="m"} 700.0
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="32",num_gpu_blocks="16384"} 1.0
"""

VLLM_V0 = """\
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.5
"""

SGLANG = """\
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m"} 4.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m"} 1.0
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="m"} 0.9
"""

LLAMACPP = """\
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 2
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 512
"""


def test_vllm_v1_names_and_info_labels():
    parsed = parse_exposition(VLLM_V1)
    assert parsed.values == {
        "num_requests_running": 2.0,
        "num_requests_waiting": 3.0,
        "kv_cache_usage_perc": 0.25,
        "num_preemptions_total": 4.0,
        "generation_tokens_total": 1000.0,
        "iteration_tokens_total_count": 7.0,
        "iteration_tokens_total_sum": 700.0,
    }
    assert parsed.info == {"cache_config_info": {"block_size": "32", "num_gpu_blocks": "16384"}}


def test_other_servers_map_onto_the_same_names():
    assert parse_exposition(VLLM_V0).values == {"kv_cache_usage_perc": 0.5}
    assert parse_exposition(SGLANG).values == {
        "num_requests_running": 4.0,
        "num_requests_waiting": 1.0,
        "kv_cache_usage_perc": 0.9,
    }
    assert parse_exposition(LLAMACPP).values == {
        "num_requests_running": 2.0,
        "num_requests_waiting": 2.0,
        "generation_tokens_total": 512.0,
    }


def test_label_sets_are_summed_across_engines():
    text = (
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0"} 1.0\n'
        'vllm:num_requests_running{engine="1"} 2.0\n'
    )
    assert parse_exposition(text).values == {"num_requests_running": 3.0}


def vllm_sized_exposition() -> str:
    """VLLM_V1 among 19 histograms of 23 buckets and their _created gauges, as vLLM exports
    them beside the gauges loadgen reads (603 lines)."""
    lines = []
    for h in range(19):
        name = f"vllm:histogram_{h}_seconds"
        lines += [f"# HELP {name} one of vLLM's histograms", f"# TYPE {name} histogram"]
        lines += [f'{name}_bucket{{engine="0",le="{b}"}} {b}' for b in (*range(1, 23), "+Inf")]
        lines += [f'{name}_count{{engine="0"}} 9.0', f'{name}_sum{{engine="0"}} 9.5']
        lines += [f"# TYPE {name}_created gauge", f'{name}_created{{engine="0"}} 1.7e9']
    return VLLM_V1 + "\n".join(lines) + "\n"


def test_only_the_lines_it_maps_reach_the_parser(monkeypatch):
    """The poller parses on the loop that times streams: a vLLM-sized exposition is parsed in
    its 8 wanted lines, with the values and labels a parse of every line gives."""
    text = vllm_sized_exposition()
    handed: list[int] = []

    def counting(given: str):
        handed.append(given.count("\n"))
        return text_string_to_metric_families(given)

    monkeypatch.setattr(exposition, "text_string_to_metric_families", counting)
    parsed = parse_exposition(text)
    assert parsed == parse_families(text_string_to_metric_families(text))
    assert parsed.values["num_requests_running"] == 2.0
    assert parsed.info["cache_config_info"]["block_size"] == "32"
    wanted = sum(1 for line in text.splitlines() if line.startswith("vllm:") and "histogram" not in
                 line and "_bucket" not in line)  # fmt: skip
    assert handed == [wanted] and wanted == 8 and text.count("\n") > 400


def test_a_longer_name_is_not_read_as_a_wanted_one():
    text = 'vllm:num_requests_running_max{engine="0"} 9.0\nvllm:num_requests_running 1.0\n'
    assert parse_exposition(text).values == {"num_requests_running": 1.0}


async def test_failed_scrape_is_a_sample_with_error_and_one_warning():
    warnings: list[str] = []
    samples = []

    async def fetch() -> str:
        raise ConnectionError("404 Not Found")

    poller = MetricsPoller(
        fetch, samples.append, interval_s=0.25, run_start_ns=time.perf_counter_ns(),
        warn=warnings.append,
    )  # fmt: skip
    await poller.scrape_once()
    await poller.scrape_once()
    assert [s.error for s in samples] == ["ConnectionError: 404 Not Found"] * 2
    assert all(s.values == {} for s in samples)
    assert len(warnings) == 1


async def test_good_scrape_keeps_info_and_values():
    samples = []

    async def fetch() -> str:
        return VLLM_V1

    poller = MetricsPoller(
        fetch, samples.append, interval_s=0.25, run_start_ns=time.perf_counter_ns()
    )
    sample = await poller.scrape_once()
    assert sample.error is None
    assert sample.values["kv_cache_usage_perc"] == 0.25
    assert poller.info["cache_config_info"]["block_size"] == "32"
    assert sample.t_ns >= 0


async def test_a_scrape_records_when_it_was_asked_where_that_precedes_its_answer():
    # The server renders its values somewhere between the two; a clock that does not move (a
    # virtual scrape) writes the one instant only.
    ticks = iter([10, 25, 40, 40])

    async def fetch() -> str:
        return VLLM_V1

    samples: list = []
    poller = MetricsPoller(fetch, samples.append, interval_s=0.25, run_start_ns=0,
                           clock=lambda: next(ticks))  # fmt: skip
    first, still = await poller.scrape_once(), await poller.scrape_once()
    assert (first.t_asked_ns, first.t_ns) == (10, 25)
    assert (still.t_asked_ns, still.t_ns) == (None, 40)


def test_collector_families_read_as_the_exposition_text_does():
    """The virtual sim samples its collector directly; the values and info must be those the
    text round trip (what the wall-clock poller reads) gives, on a sim mid-run."""
    from prometheus_client import generate_latest

    from loadgen.exposition import parse_families
    from loadgen.sim.requests import SimRequest
    from loadgen.sim.server import SimState
    from loadgen.sim.virtual import config_from_settings

    state = SimState(config_from_settings({"profile": "default", "num_speculative_tokens": 2}))
    for i in range(3):
        state.engine.add_request(SimRequest(f"r{i}", list(range(5, 400 + 100 * i)), 20))
    for _ in range(4):
        state.engine.step()
    direct = parse_families(state.registry.collect())
    text = parse_exposition(generate_latest(state.registry).decode("utf-8"))
    assert direct == text
    assert direct.values["generation_tokens_total"] > 0
    assert direct.values["num_requests_running"] == 3.0
    assert direct.values["spec_decode_num_drafts_total"] > 0
    assert direct.info["cache_config_info"]["block_size"] == "16"
