"""The `loadgen` command line. Each subcommand lives beside the stage it drives, and is imported
only when it runs: `loadgen --version` loaded matplotlib, aiohttp and the sim for 2 s."""

from __future__ import annotations

import importlib

import click

from loadgen import __version__

# Command name -> (module, attribute).
COMMANDS = {
    "request": ("loadgen.engine.request_cmd", "request_cmd"),
    "capacity": ("loadgen.engine.capacity_cmd", "capacity_cmd"),
    "calibrate": ("loadgen.engine.calibrate_cmd", "calibrate_cmd"),
    "fidelity": ("loadgen.engine.fidelity_cmd", "fidelity_cmd"),
    "validate": ("loadgen.scenario.validate_cmd", "validate_cmd"),
    "run": ("loadgen.engine.cmd", "run_cmd"),
    "report": ("loadgen.report.cmd", "report_cmd"),
    "compare": ("loadgen.report.cmd", "compare_cmd"),
    "export": ("loadgen.report.export_cmd", "export_cmd"),
    "sim": ("loadgen.sim.cli", "sim"),
    "probe-cache": ("loadgen.engine.probe_cache_cmd", "probe_cache_cmd"),
    "soak": ("loadgen.engine.soak_cmd", "soak_cmd"),
    "servers": ("loadgen.server.servers_cmd", "servers_cmd"),
}


class LazyGroup(click.Group):
    """Subcommands imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, attr = COMMANDS[cmd_name]
        command: click.Command = getattr(importlib.import_module(module), attr)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="loadgen")
def main() -> None:
    """Load generator and mixed-workload simulator for OpenAI-compatible LLM servers."""
