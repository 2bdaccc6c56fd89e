"""The `loadgen` command line. Each subcommand lives beside the stage it drives."""

from __future__ import annotations

import click

from loadgen import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="loadgen")
def main() -> None:
    """Load generator and mixed-workload simulator for OpenAI-compatible LLM servers."""


from loadgen.client.probe import request_cmd  # noqa: E402

main.add_command(request_cmd)

from loadgen.scenario.validate_cmd import validate_cmd  # noqa: E402

main.add_command(validate_cmd)

from loadgen.engine.cmd import run_cmd  # noqa: E402

main.add_command(run_cmd)

from loadgen.report.cmd import compare_cmd, report_cmd  # noqa: E402

main.add_command(report_cmd)
main.add_command(compare_cmd)

from loadgen.sim.cli import sim  # noqa: E402

main.add_command(sim)

from loadgen.engine.probe_cmd import probe_cache_cmd  # noqa: E402

main.add_command(probe_cache_cmd)

from loadgen.engine.soak_cmd import soak_cmd  # noqa: E402

main.add_command(soak_cmd)

from loadgen.server.servers_cmd import servers_cmd  # noqa: E402

main.add_command(servers_cmd)
