"""loadgen/simoptions.py is the one list of the sim's settings: every face of the sim (its CLI,
the scenario's `sim:` block, SimConfig, sweeps, a launch's argv, the virtual sim) takes the
table's rows and nothing else."""

from __future__ import annotations

import dataclasses

import click
from click.testing import CliRunner

from loadgen.commands.sim import sim
from loadgen.scenario.checks import BOOL
from loadgen.scenario.model import SERVER_FLAGS, SimConfig
from loadgen.scenario.schema_blocks import SIM_RULES, SWEEP_RULES
from loadgen.server.sim import SimProfile, sim_flags
from loadgen.sim.engine import EngineConfig
from loadgen.sim.server import SimServerConfig
from loadgen.sim.virtual import config_from_settings, sim_facts
from loadgen.simoptions import (
    SIM_FACTS,
    SIM_OPTION_NAMES,
    SIM_OPTIONS,
    negated,
    sim_flag,
)

# The sim's options that are not settings: where it listens, the name it serves, its profile
# and its faults (each chosen or parsed by its own module).
NOT_ROWS = {"host", "port", "model", "profile", "faults"}
ROWS = [o.name for o in SIM_OPTIONS]
BLOCK_ROWS = {o.name for o in SIM_OPTIONS if o.sim_block}
# A value other than the default, inside the bounds, for every row.
OTHER = {
    "max_num_seqs": 3, "max_num_batched_tokens": 512, "block_size": 32, "num_gpu_blocks": 600,
    "enable_prefix_caching": False, "long_prefill_token_threshold": 64,
    "num_speculative_tokens": 2, "acceptance_rate": 0.5, "max_model_len": 4096, "speed": 20.0,
    "request_overhead_s": 0.25, "seed": 7, "reasoning_tokens": 5, "api_delay_s": 0.125,
}  # fmt: skip


def test_the_cli_options_are_the_rows_in_order() -> None:
    params = [p for p in sim.params if isinstance(p, click.Option) and p.name not in NOT_ROWS]
    assert [p.name for p in params if p.name != "help"] == ROWS
    for p in params:
        if p.name == "help":
            continue
        row = SIM_OPTION_NAMES[p.name]
        owner = EngineConfig() if row.owner == "engine" else SimServerConfig()
        assert (p.help, p.default) == (row.help, getattr(owner, row.name)), p.name
        if row.kind is bool:
            assert (p.opts, p.secondary_opts) == ([sim_flag(row.name)], [negated(p.opts[0])])
        else:
            assert tuple(p.opts) == row.flags
    shown = CliRunner().invoke(sim, ["--help"]).output
    for row in SIM_OPTIONS:
        for flag in row.flags:
            assert f"  {flag}" in shown or f", {flag}" in shown, flag


def test_the_sim_block_is_the_rows_it_may_set() -> None:
    assert set(SIM_RULES) == BLOCK_ROWS
    settings = {f.name for f in dataclasses.fields(SimConfig)} - {"profile", "faults"}
    assert settings == BLOCK_ROWS
    # SimConfig's order, which a launch's argv keeps (speed before max_model_len).
    order = [f.name for f in dataclasses.fields(SimConfig) if f.name in BLOCK_ROWS]
    assert list(SIM_RULES) == order


def test_the_sim_block_rules_say_what_they_said() -> None:
    expect = {name: rule.expect for name, rule in SIM_RULES.items()}
    assert expect == {
        "max_num_seqs": "an integer >= 1", "max_num_batched_tokens": "an integer >= 1",
        "block_size": "an integer >= 1", "num_gpu_blocks": "an integer >= 1 and <= 1048576",
        "enable_prefix_caching": BOOL.expect, "num_speculative_tokens": "an integer >= 0",
        "acceptance_rate": "a number >= 0 and <= 1", "speed": "a number >= 0.001 and <= 1000",
        "max_model_len": "an integer >= 1", "reasoning_tokens": "an integer >= 0",
        "api_delay_s": "a number >= 0",
    }  # fmt: skip


def test_a_sweep_varies_the_rows_it_may() -> None:
    swept = {n for o in SIM_OPTIONS if o.sweep for n in (o.name, *o.aliases)}
    assert set(SERVER_FLAGS) & set(SIM_OPTION_NAMES) == swept
    # Each by its row's bounds, so a value the sim would refuse at boot fails validation.
    assert set(SWEEP_RULES) == swept
    for name, rule in SWEEP_RULES.items():
        lo = SIM_OPTION_NAMES[name].lo
        assert lo is None or not rule.accepts(lo - 1), name


def test_argv_and_the_virtual_config_match_the_cli() -> None:
    """Every row under every name: sim_flags' argv parsed by `loadgen sim` gives the values
    back, and config_from_settings builds what the CLI boots with."""
    assert set(OTHER) == set(ROWS)
    defaults = sim.make_context("sim", []).params
    assert config_from_settings({n: defaults[n] for n in ROWS}) == config_from_settings({})
    for name, value in OTHER.items():
        for alias in SIM_OPTION_NAMES[name].aliases:
            assert sim.make_context("sim", sim_flags({alias: value})).params[name] == value
            assert config_from_settings({alias: value}) == config_from_settings({name: value})
    parsed = sim.make_context("sim", sim_flags(OTHER)).params
    assert {n: parsed[n] for n in ROWS} == OTHER
    config = config_from_settings(OTHER)
    for row in SIM_OPTIONS:
        owner = config.engine if row.owner == "engine" else config
        assert getattr(owner, row.name) == OTHER[row.name], row.name


def test_the_sim_facts_and_window_are_rows() -> None:
    # One `fact` mark per row: the launch's flags and the virtual sim's facts both read it.
    facts = [o.name for o in SIM_FACTS]
    assert facts == ["max_num_seqs", "max_num_batched_tokens", "block_size", "num_gpu_blocks",
                     "max_model_len"]  # fmt: skip
    assert {n: f for n, (f,) in SimProfile.fact_flags.items()} == {
        n: SIM_OPTION_NAMES[n].flags[0] for n in facts
    }
    config = config_from_settings(OTHER)
    assert sim_facts(config) == {n: OTHER[n] for n in facts} | {
        "kv_cache_tokens": OTHER["num_gpu_blocks"] * OTHER["block_size"]
    }
