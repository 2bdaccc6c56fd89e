"""The `loadgen` command line. Each subcommand is a module of loadgen/commands/, imported
only when it runs: `loadgen --version` loaded matplotlib, aiohttp and the sim for 2 s."""

from __future__ import annotations

import importlib
import signal
import sys

import click

from loadgen import __version__

# Command name -> (module in loadgen/commands/, attribute).
COMMANDS = {
    "request": ("request", "request_cmd"),
    "bench": ("bench_serve", "bench_group"),
    "capacity": ("capacity", "capacity_cmd"),
    "calibrate": ("calibrate", "calibrate_cmd"),
    "fidelity": ("fidelity", "fidelity_cmd"),
    "validate": ("validate", "validate_cmd"),
    "run": ("run", "run_cmd"),
    "report": ("report", "report_cmd"),
    "compare": ("report", "compare_cmd"),
    "export": ("export", "export_cmd"),
    "sim": ("sim", "sim"),
    "probe-cache": ("probe_cache", "probe_cache_cmd"),
    "soak": ("soak", "soak_cmd"),
    "servers": ("servers", "servers_cmd"),
    "tune": ("tune", "tune_cmd"),
}


class LazyGroup(click.Group):
    """Subcommands imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, attr = COMMANDS[cmd_name]
        command: click.Command = getattr(
            importlib.import_module(f"loadgen.commands.{module}"), attr
        )
        return command

    def invoke(self, ctx: click.Context) -> object:
        """A Ctrl-C outside a run's loop (a command starting, a report being written) exits
        130 as a stopped run does, not click's "Aborted!" and 1: records already written
        stay."""
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            from loadgen.records import stop_exit_code

            click.echo("interrupted: records written so far are kept", err=True)
            sys.exit(stop_exit_code(getattr(exc, "signal", signal.SIGINT)))


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="loadgen")
def main() -> None:
    """Load generator and mixed-workload simulator for OpenAI-compatible LLM servers."""
