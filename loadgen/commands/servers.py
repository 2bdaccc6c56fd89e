"""`loadgen servers`: which server kinds are installed here (server/installed.py finds them)."""

from __future__ import annotations

import click

from loadgen.server.installed import installed_servers, render


@click.command("servers")
def servers_cmd() -> None:
    """Which servers --server can launch here, their versions and how each is started."""
    click.echo(render(installed_servers()))
