"""The `loadgen` command line. Each subcommand lives beside the stage it drives."""

from __future__ import annotations

import click

from loadgen import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="loadgen")
def main() -> None:
    """Load generator and mixed-workload simulator for OpenAI-compatible LLM servers."""
