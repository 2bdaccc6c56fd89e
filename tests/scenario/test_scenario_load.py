"""Scenario loading: every malformed input gives exact `file:line: field.path: message` lines,
all of them at once, and never a traceback."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from loadgen.commands.validate import validate_cmd
from loadgen.scenario.load import REPO_SCENARIOS, ScenarioError, load_scenario
from loadgen.scenario.model import (
    Closed,
    Poisson,
    TraceRow,
    default_prefix_tokens,
    scenario_to_json,
)
from loadgen.scenario.schema_blocks import FAULT_FORMS
from loadgen.sim.profiles import SIM_PROFILES

from support.paths import DATA

SHIPPED = sorted(p.stem for p in REPO_SCENARIOS.glob("*.yaml"))

# Line numbers in the cases below count from this text's first line.
BASE = """\
name: t
seed: 7
groups:
  - name: a
    count: 2
    prompt: {tokens: 64, shape: prose}
    max_tokens: 8
  - name: b
    count: 1
    prompt: {tokens: 32, shape: code, cache: shared}
    max_tokens: 4
"""
TOP = (
    "name, description, api, chat_template_kwargs, seed, model, groups, arrival, repetitions, "
    "warmup, metrics, timeouts, sim, sweep, slo, server, soak, sampling"
)
GROUP = "name, count, prompt, max_tokens, min_tokens, ignore_eos, start, session"


def write(folder: Path, text: str, name: str = "s.yaml") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def errors_of(folder: Path, text: str, overrides: tuple[str, ...] = ()) -> list[str]:
    write(folder, text)
    with pytest.raises(ScenarioError) as info:
        load_scenario("s.yaml", overrides)
    assert str(info.value) == "\n".join(info.value.errors)
    return info.value.errors


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def test_base_is_valid(tmp_path: Path) -> None:
    write(tmp_path, BASE)
    s = load_scenario("s.yaml")
    assert [(g.name, g.count, g.prompt.tokens, g.prompt.cache) for g in s.groups] == [
        ("a", 2, 64, "salted"),
        ("b", 1, 32, "shared"),
    ]
    assert s.group("b").prompt.prefix_tokens == default_prefix_tokens(32) == 24
    assert (s.api, s.repetitions, s.metrics.poll_interval_s, s.sim, s.sweep) == (
        "completions", 1, 0.25, None, None,
    )  # fmt: skip
    assert s.arrival.kind == "together"


MALFORMED = [
    pytest.param(
        BASE.replace("seed: 7", "seed: abc"),
        (),
        ["s.yaml:2: seed: got 'abc' (expected an integer of at most 63 bits)"],
        id="bad-type",
    ),
    pytest.param(
        BASE.replace("seed: 7\n", ""),
        (),
        ["s.yaml:1: seed: missing (expected an integer of at most 63 bits)"],
        id="missing-field",
    ),
    pytest.param(
        BASE + "repetitons: 2\n",
        (),
        [
            f"s.yaml:12: repetitons: unknown key (expected one of: {TOP}; did you mean "
            "'repetitions'?)"
        ],
        id="unknown-key",
    ),
    pytest.param(
        BASE.replace("count: 2", "count: -1"),
        (),
        ["s.yaml:5: groups.a.count: got -1 (expected an integer >= 1)"],
        id="negative-count",
    ),
    pytest.param(
        BASE.replace("count: 2", "count: true"),
        (),
        ["s.yaml:5: groups.a.count: got true (expected an integer >= 1)"],
        id="bool-is-not-int",
    ),
    pytest.param(
        BASE.replace("max_tokens: 8", "max_token: 8"),
        (),
        [
            "s.yaml:4: groups.a.max_tokens: missing (expected an integer >= 1)",
            f"s.yaml:7: groups.a.max_token: unknown key (expected one of: {GROUP}; did you mean "
            "'max_tokens'?)",
        ],
        id="misspelt-group-key",
    ),
    pytest.param(
        BASE.replace("shape: code, cache: shared", "shape: code, cache: salty"),
        (),
        [
            "s.yaml:10: groups.b.prompt.cache: got 'salty' (expected one of: salted, shared, "
            "primed; did you mean 'salted'?)"
        ],
        id="bad-enum",
    ),
    pytest.param(
        BASE.replace("shape: prose}", "shape: poem}"),
        (),
        [
            "s.yaml:6: groups.a.prompt.shape: got 'poem' (expected prose, code, needle or "
            "{file: path}; did you mean 'prose'?)"
        ],
        id="bad-shape",
    ),
    pytest.param(
        BASE.replace("tokens: 64", "tokens: 8"),
        (),
        ["s.yaml:6: groups.a.prompt.tokens: got 8 (expected an integer >= 16)"],
        id="prompt-too-short",
    ),
    pytest.param(
        BASE.replace("seed: 7", "seed: 7: 8"),
        (),
        ["s.yaml:2: yaml: mapping values are not allowed here"],
        id="bad-yaml",
    ),
    pytest.param(
        BASE.replace("    count: 2", "\tcount: 2"),
        (),
        ["s.yaml:5: yaml: found character '\\t' that cannot start any token"],
        id="bad-yaml-tab",
    ),
    pytest.param(
        BASE + "seed: 8\n", (), ["s.yaml:12: yaml: duplicate key 'seed'"], id="duplicate-key"
    ),
    pytest.param(
        "name: t\nseed: 7\ngroups: 5\n",
        (),
        ["s.yaml:3: groups: got 5 (expected a list)"],
        id="groups-not-a-list",
    ),
    pytest.param(
        "name: t\nseed: 7\n",
        (),
        ["s.yaml:1: groups: missing (expected a list)"],
        id="groups-missing",
    ),
    pytest.param(
        BASE.replace("prompt: {tokens: 64, shape: prose}", "prompt: [64]"),
        (),
        [
            "s.yaml:6: groups.a.prompt: got a list (expected a mapping)",
            "s.yaml:6: groups.a.prompt.tokens: missing (expected an integer >= 16)",
        ],
        id="prompt-not-a-mapping",
    ),
    pytest.param(
        BASE.replace("    prompt: {tokens: 64, shape: prose}\n", ""),
        (),
        [
            "s.yaml:4: groups.a.prompt: missing (expected a mapping)",
            "s.yaml:4: groups.a.prompt.tokens: missing (expected an integer >= 16)",
        ],
        id="prompt-missing",
    ),
    pytest.param(
        "- a\n- b\n",
        (),
        ["s.yaml:1: scenario: got a list (expected a mapping of fields)"],
        id="not-a-mapping",
    ),
    pytest.param(
        BASE.replace("name: b", "name: a"),
        (),
        ["s.yaml:8: groups.a.name: got 'a' again (expected unique group names)"],
        id="duplicate-group",
    ),
    pytest.param(
        BASE + "arrival: {poisson: {rate_per_s: 0, count: 10}}\n",
        (),
        ["s.yaml:12: arrival.poisson.rate_per_s: got 0 (expected a number > 0)"],
        id="zero-rate",
    ),
    pytest.param(
        BASE + "arrival: {poison: {rate_per_s: 1}}\n",
        (),
        [
            "s.yaml:12: arrival.poison: unknown arrival (expected one of: together, staggered, "
            "closed, poisson, gamma, trace; did you mean 'poisson'?)"
        ],
        id="unknown-arrival",
    ),
    pytest.param(
        BASE + "arrival: poisson\n",
        (),
        [
            "s.yaml:12: arrival: got 'poisson' alone (expected {poisson: {rate_per_s, count, "
            "duration_s, concurrency, ramp, exact_span}})"
        ],
        id="arrival-without-parameters",
    ),
    pytest.param(
        BASE + "arrival:\n  gamma:\n    rate_per_s: 2\n",
        (),
        ["s.yaml:14: arrival.gamma.burstiness: missing (expected a number > 0)"],
        id="gamma-without-burstiness",
    ),
    pytest.param(
        BASE.replace("    max_tokens: 8", "    max_tokens: 8\n    start: 2")
        + "arrival: {closed: {concurrency: 2}}\n",
        (),
        [
            "s.yaml:8: groups.a.start: got 2 under a closed arrival (expected start only with "
            "together or staggered)"
        ],
        id="start-in-closed-loop",
    ),
    pytest.param(
        BASE.replace("shape: prose}", "shape: prose, prefix_tokens: 32}"),
        (),
        [
            "s.yaml:6: groups.a.prompt.prefix_tokens: only applies to cache shared or primed "
            "(expected one of those, or remove it)"
        ],
        id="prefix-on-salted",
    ),
    pytest.param(
        BASE.replace("cache: shared}", "cache: shared, prefix_tokens: 40}"),
        (),
        ["s.yaml:10: groups.b.prompt.prefix_tokens: got 40 (expected <= tokens, 32)"],
        id="prefix-longer-than-prompt",
    ),
    pytest.param(
        BASE.replace("    max_tokens: 8", "    max_tokens: 8\n    min_tokens: 9"),
        (),
        ["s.yaml:8: groups.a.min_tokens: got 9 (expected <= max_tokens, 8)"],
        id="min-above-max",
    ),
    pytest.param(
        BASE + "chat_template_kwargs: {enable_thinking: false}\n",
        (),
        [
            "s.yaml:12: chat_template_kwargs: only applies to api: chat (expected api: chat, or "
            "remove it)"
        ],
        id="template-kwargs-on-completions",
    ),
    pytest.param(
        BASE + "sim: {profile: defualt}\n",
        (),
        [
            f"s.yaml:12: sim.profile: got 'defualt' (expected one of: {', '.join(SIM_PROFILES)}; "
            "did you mean 'default'?)"
        ],
        id="bad-sim-profile",
    ),
    pytest.param(
        BASE + "sim:\n  faults: [http500=2]\n",
        (),
        [
            "s.yaml:13: sim.faults[0]: fault 'http500=2': a probability must lie in 0..1 "
            f"(expected {FAULT_FORMS})"
        ],
        id="bad-fault",
    ),
    pytest.param(
        BASE + "sweep: {max_num_batched_token: [512]}\n",
        (),
        [
            "s.yaml:12: sweep.max_num_batched_token: unknown key (expected boots_per_arm, a "
            "server flag "
            "(max_num_seqs, max_num_batched_tokens, block_size, num_gpu_blocks, "
            "num_gpu_blocks_override, "
            "enable_prefix_caching, enable_chunked_prefill, num_speculative_tokens, "
            "acceptance_rate, speed, "
            "gpu_memory_utilization, kv_cache_dtype, max_model_len, long_prefill_token_threshold, "
            "max_num_partial_prefills, scheduling_policy, swap_space, cpu_offload_gb, "
            "tensor_parallel_size, "
            "enforce_eager) or a dotted --set path; did you mean 'max_num_batched_tokens'?)"
        ],
        id="unknown-sweep-flag",
    ),
    pytest.param(
        BASE + "sweep:\n  groups.a.count:\n    - 1\n    - 0\n",
        (),
        ["s.yaml:15: groups.a.count: got 0 (expected an integer >= 1)"],
        id="bad-client-sweep-value",
    ),
    pytest.param(
        BASE + "sweep: {max_num_seqs: []}\n",
        (),
        ["s.yaml:12: sweep.max_num_seqs: got a list (expected a non-empty list)"],
        id="empty-sweep-axis",
    ),
    pytest.param(
        BASE + "sweep: {max_num_seqs: [4, 0]}\n",
        (),
        ["s.yaml:12: sweep.max_num_seqs[1]: got 0 (expected an integer >= 1)"],
        id="bad-sim-flag-in-sweep",
    ),
    pytest.param(
        BASE + "sweep: {num_gpu_blocks_override: [0], long_prefill_token_threshold: [-1]}\n",
        ("sweep.speed=[0]",),
        [
            "s.yaml:12: sweep.num_gpu_blocks_override[0]: got 0 (expected an integer >= 1 and "
            "<= 1048576)",
            "s.yaml:12: sweep.long_prefill_token_threshold[0]: got -1 (expected an integer >= 0)",
            "--set sweep.speed=[0]: sweep.speed[0]: got 0 (expected a number >= 0.001 and <= 1000)",
        ],
        id="sim-flag-aliases-and-sweep-only-rows-bounded",
    ),
    pytest.param(
        BASE,
        ("groups.nosuch.count=2",),
        [
            "--set groups.nosuch.count=2: groups.nosuch.count: groups has no item 'nosuch' "
            "(expected an index or a name: a, b)"
        ],
        id="override-unknown-group",
    ),
    pytest.param(
        BASE,
        ("groups.a.prompt.tokenz=5",),
        [
            "--set groups.a.prompt.tokenz=5: groups.a.prompt.tokenz: unknown key (expected one "
            "of: tokens, shape, cache, prefix_tokens, depth, dataset; did you mean 'tokens'?)"
        ],
        id="override-unknown-key",
    ),
    pytest.param(
        BASE,
        ("seed.value=3",),
        [
            "--set seed.value=3: seed.value: seed is not a mapping (expected a path into the "
            "scenario)"
        ],
        id="override-through-a-scalar",
    ),
    pytest.param(
        BASE, ("seed",), ["--set seed: expected key.path=value"], id="override-without-value"
    ),
    pytest.param(
        BASE,
        ("seed=x",),
        ["--set seed=x: seed: got 'x' (expected an integer of at most 63 bits)"],
        id="override-bad-value",
    ),
    pytest.param(
        BASE + "arrival: {staggered: {interval_s: 0}}\n",
        (),
        ["s.yaml:12: arrival.staggered.interval_s: got 0 (expected a number > 0 and <= 604800)"],
        id="zero-interval",
    ),
    pytest.param(
        BASE + "timeouts: {idle_s: -1}\n",
        (),
        ["s.yaml:12: timeouts.idle_s: got -1 (expected a number > 0 and <= 604800 or null)"],
        id="negative-timeout",
    ),
    pytest.param(
        BASE.replace("shape: prose}", "shape: {file: nowhere.txt}}"),
        (),
        [
            "s.yaml:6: groups.a.prompt.shape.file: got 'nowhere.txt': cannot read "
            "{tmp}/nowhere.txt (FileNotFoundError) (expected a UTF-8 text file)"
        ],
        id="missing-prompt-file",
    ),
    pytest.param(
        BASE + "arrival: {trace: {path: missing.jsonl}}\n",
        (),
        [
            # Checked as a trace's groups though the file is missing: these stand either way.
            "s.yaml:6: groups.a.prompt.tokens: set by each trace row "
            "(expected no value here: remove it)",
            "s.yaml:7: groups.a.max_tokens: set by each trace row "
            "(expected no value here: remove it)",
            "s.yaml:10: groups.b.prompt.tokens: set by each trace row "
            "(expected no value here: remove it)",
            "s.yaml:10: groups.b.prompt.cache: got 'shared' under a trace arrival (expected "
            "salted: trace rows vary in size)",
            "s.yaml:11: groups.b.max_tokens: set by each trace row "
            "(expected no value here: remove it)",
            "s.yaml:12: arrival.trace.path: got 'missing.jsonl': no such file "
            "{tmp}/missing.jsonl (expected a trace file, relative to the scenario)",
        ],
        id="missing-trace",
    ),
    pytest.param(
        BASE + "groups: []\n", (), ["s.yaml:12: yaml: duplicate key 'groups'"], id="groups-twice"
    ),
    pytest.param(
        "name: t\nseed: 1\ngroups: []\n",
        (),
        ["s.yaml:3: groups: got an empty list (expected at least one group)"],
        id="no-groups",
    ),
]


@pytest.mark.parametrize(("text", "overrides", "expected"), MALFORMED)
def test_malformed_scenario_reports_exact_lines(
    tmp_path: Path, text: str, overrides: tuple[str, ...], expected: list[str]
) -> None:
    tmp = str(tmp_path.resolve())
    assert errors_of(tmp_path, text, overrides) == [e.replace("{tmp}", tmp) for e in expected]


def test_every_error_of_a_file_is_reported_at_once(tmp_path: Path) -> None:
    text = """\
        name: bad name
        seed: 1.5
        api: grpc
        groups:
          - name: a
            count: 0
            prompt: {tokens: 64, shape: prose, cache: primed, prefix_tokens: 100}
            max_tokens: 0
            colour: blue
        arrival: {closed: {concurrency: 0, duration_s: -3}}
        warmup: -1
        """
    assert errors_of(tmp_path, text, ("repetitions=0",)) == [
        "s.yaml:1: name: got 'bad name' (expected a name of letters, digits, '_' or '-')",
        "s.yaml:2: seed: got 1.5 (expected an integer of at most 63 bits)",
        "s.yaml:3: api: got 'grpc' (expected one of: completions, chat)",
        "s.yaml:6: groups.a.count: got 0 (expected an integer >= 1)",
        "s.yaml:7: groups.a.prompt.prefix_tokens: got 100 (expected <= tokens, 64)",
        "s.yaml:8: groups.a.max_tokens: got 0 (expected an integer >= 1)",
        f"s.yaml:9: groups.a.colour: unknown key (expected one of: {GROUP})",
        "s.yaml:10: arrival.closed.duration_s: got -3 (expected a number > 0 and <= 604800 "
        "or null)",
        "s.yaml:10: arrival.closed.concurrency: got 0 (expected an integer >= 1)",
        "s.yaml:11: warmup: got -1 (expected an integer >= 0)",
        "--set repetitions=0: repetitions: got 0 (expected an integer >= 1)",
    ]


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_scenario_validates(name: str) -> None:
    s = load_scenario(name)
    assert s.name == name
    assert s.sim is not None
    json.dumps(scenario_to_json(s))


def test_shipped_set_is_complete() -> None:
    assert SHIPPED == [
        "agent_sessions", "agent_tools", "azure_code", "calibrate", "capacity_seats",
        "capacity_whale", "deep_decode", "ladder", "needle",
        "politeness", "politeness_fine",
        "prose_vs_code", "sharegpt", "smoke", "soak_agent", "soak_steady", "tune_mixed", "whale_c2",
        "whale_c4", "whale_c4_cached", "whale_c8",
    ]  # fmt: skip


def test_whale_scenarios_mirror_the_seed() -> None:
    for name, minnows in (("whale_c2", 1), ("whale_c4", 3), ("whale_c8", 7)):
        s = load_scenario(name)
        whale, small = s.groups
        assert (whale.count, whale.prompt.tokens, whale.prompt.cache) == (1, 72600, "salted")
        assert (small.count, small.prompt.tokens, small.max_tokens) == (minnows, 4096, 256)
        assert s.sim.flags() == {
            "max_num_seqs": 4, "max_num_batched_tokens": 2048, "block_size": 16,
            "num_gpu_blocks": 8527, "enable_prefix_caching": True, "max_model_len": 131072,
        }  # fmt: skip
    cached = load_scenario("whale_c4_cached")
    assert cached.group("whale").prompt.cache == "primed"
    assert cached.group("whale").prompt.prefix_tokens == 72600 - 64


def test_politeness_sweeps_the_budget_with_restarts() -> None:
    s = load_scenario("politeness")
    assert [(a.name, a.flags, a.settings) for a in s.sweep.arms] == [
        ("max_num_batched_tokens=2048", {"max_num_batched_tokens": 2048}, {}),
        ("max_num_batched_tokens=1024", {"max_num_batched_tokens": 1024}, {}),
        ("max_num_batched_tokens=512", {"max_num_batched_tokens": 512}, {}),
    ]
    assert s.sweep.boots_per_arm is None


def test_ladder_is_a_client_side_sweep() -> None:
    s = load_scenario("ladder")
    arms = s.sweep.arms
    assert [a.name for a in arms] == [f"groups.streams.count={n}" for n in (1, 2, 4, 8)]
    assert [a.scenario.group("streams").count for a in arms] == [1, 2, 4, 8]
    assert all(a.flags == {} and a.scenario.sweep is None for a in arms)


def test_override_replaces_a_value_and_a_block(tmp_path: Path) -> None:
    write(tmp_path, BASE)
    s = load_scenario("s.yaml", ["groups.1.count=5", "arrival={closed: {concurrency: 3}}"])
    assert s.group("b").count == 5
    assert s.arrival == Closed(concurrency=3)
    s = load_scenario("s.yaml", ["arrival.poisson.rate_per_s=2.5"])
    assert s.arrival == Poisson(rate_per_s=2.5)


def test_bare_names_resolve_through_the_env_var(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    write(folder, BASE, "local_one.yaml")
    monkeypatch.setenv("LOADGEN_SCENARIOS", str(folder))
    assert load_scenario("local_one").source == (folder / "local_one.yaml").resolve()
    with pytest.raises(ScenarioError) as info:
        load_scenario("nosuch")
    assert info.value.errors[0].startswith(f"nosuch: no such scenario (looked in {folder}, ")
    known = (
        "known: agent_sessions, agent_tools, azure_code, calibrate, capacity_seats, "
        "capacity_whale, deep_decode, ladder, local_one, "
    )
    assert known in info.value.errors[0]


def test_traces_load_rows_with_limit_and_time_scale(tmp_path: Path) -> None:
    for name in ("mooncake_small.jsonl", "azure_small.csv", "burstgpt_small.csv"):
        (tmp_path / name).write_bytes((DATA / name).read_bytes())
    trace = "  - name: a\n    prompt: {shape: prose}\narrival: {trace: {path: %s%s}}\n"
    head = "name: t\nseed: 1\ngroups:\n"
    write(tmp_path, head + trace % ("mooncake_small.jsonl", ", time_scale: 0.5"))
    a = load_scenario("s.yaml").arrival
    assert (a.format, a.limit, a.time_scale) == ("mooncake", None, 0.5)
    assert a.rows == (
        TraceRow(0, 6758, 500, (0, 1, 2)), TraceRow(0, 2290, 316, (0, 42)),
        TraceRow(750_000_000, 8, 3, (7,)), TraceRow(2_125_000_000, 23141, 453, (0, 68, 69)),
    )  # fmt: skip
    write(tmp_path, head + trace % ("azure_small.csv", ", limit: 3"))
    assert load_scenario("s.yaml").arrival.rows == (
        TraceRow(0, 4808, 10), TraceRow(52_000_000, 3180, 8), TraceRow(1_520_040_100, 110, 27),
    )  # fmt: skip
    write(tmp_path, head + trace % ("burstgpt_small.csv", ""))
    assert [r.offset_ns for r in load_scenario("s.yaml").arrival.rows] == [
        0,
        40 * 10**9,
        113 * 10**9,
    ]


def test_trace_rows_fix_sizes_so_groups_may_not(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_bytes((DATA / "mooncake_small.jsonl").read_bytes())
    text = """\
        name: t
        seed: 1
        groups:
          - name: a
            prompt: {tokens: 64, cache: shared}
            max_tokens: 9
        arrival: {trace: {path: t.jsonl}}
        warmup: 2
        """
    assert errors_of(tmp_path, text) == [
        "s.yaml:5: groups.a.prompt.tokens: set by each trace row (expected no value here: "
        "remove it)",
        "s.yaml:5: groups.a.prompt.cache: got 'shared' under a trace arrival (expected salted: "
        "trace rows vary in size)",
        "s.yaml:6: groups.a.max_tokens: set by each trace row "
            "(expected no value here: remove it)",
        "s.yaml:8: warmup: needs tokens and max_tokens under a trace arrival (expected {count, "
        "tokens, max_tokens})",
    ]  # fmt: skip


def test_an_unreadable_trace_is_its_only_error(tmp_path: Path) -> None:
    # The groups are checked as a trace's groups still: a trace sizes them, so a bad file is
    # one problem, not three (max_tokens, count and prompt.tokens "missing" came with it).
    (tmp_path / "bad.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\nbad,x,y\n")
    text = """\
        name: t
        seed: 1
        groups:
          - name: a
            prompt: {shape: code}
        arrival: {trace: {path: bad.csv, format: azure}}
        """
    assert errors_of(tmp_path, text) == [
        f"s.yaml:6: arrival.trace.path: unreadable trace: {tmp_path / 'bad.csv'}:2: bad azure "
        "row (time data 'bad' does not match format '%Y-%m-%d %H:%M:%S') (expected a readable "
        "azure trace)",
    ]
    # A trace arrival still refuses what a trace sets, readable file or not.
    text = text.replace("{shape: code}", "{shape: code, tokens: 64}")
    assert errors_of(tmp_path, text)[0] == (
        "s.yaml:5: groups.a.prompt.tokens: set by each trace row (expected no value here: "
        "remove it)"
    )


def test_validate_command(tmp_path: Path) -> None:
    write(tmp_path, BASE, "good.yaml")
    write(tmp_path, BASE.replace("seed: 7", "seed: x"), "bad.yaml")
    runner = CliRunner()
    ok = runner.invoke(validate_cmd, ["good.yaml", "smoke"])
    assert (ok.exit_code, ok.output) == (0, "ok: good.yaml\nok: smoke\n")
    bad = runner.invoke(validate_cmd, ["good.yaml", "bad.yaml", "--set", "groups.a.count=0"])
    assert bad.exit_code == 1
    assert bad.stdout == ""
    assert bad.stderr == (
        "--set groups.a.count=0: groups.a.count: got 0 (expected an integer >= 1)\n"
        "bad.yaml:2: seed: got 'x' (expected an integer of at most 63 bits)\n"
        "--set groups.a.count=0: groups.a.count: got 0 (expected an integer >= 1)\n"
    )


def test_sweep_axes_multiply_into_named_arms(tmp_path: Path) -> None:
    text = BASE + "sweep:\n  max_num_seqs: [2, 4]\n  groups.a.count: [1, 3]\n  boots_per_arm: 3\n"
    write(tmp_path, text)
    sweep = load_scenario("s.yaml").sweep
    assert sweep.boots_per_arm == 3
    assert sweep.axes == (("max_num_seqs", (2, 4)), ("groups.a.count", (1, 3)))
    assert [(a.name, a.scenario.group("a").count) for a in sweep.arms] == [
        ("max_num_seqs=2,groups.a.count=1", 1),
        ("max_num_seqs=2,groups.a.count=3", 3),
        ("max_num_seqs=4,groups.a.count=1", 1),
        ("max_num_seqs=4,groups.a.count=3", 3),
    ]
    assert sweep.arms[3].flags == {"max_num_seqs": 4}
    assert sweep.arms[3].settings == {"groups.a.count": 3}


def test_a_bad_flag_value_does_not_hide_the_bad_set_paths_beside_it(tmp_path: Path) -> None:
    # The --set path errors showed only once the flag's were fixed: "every error at once".
    text = BASE + "sweep:\n  groups.a.count: [-2]\n  max_num_seqs: [0]\n  groups.b.count: [0]\n"
    errors = errors_of(tmp_path, text)
    assert [e.split(": ", 2)[1] for e in errors] == [
        "groups.a.count", "sweep.max_num_seqs[0]", "groups.b.count",
    ]  # fmt: skip
