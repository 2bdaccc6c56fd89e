"""`loadgen probe-cache`: the sized warm pair against a server, one line out; the exit code says
healthy (0), dead (1), refused or could not tell (2), or wrong answers from the cache (3: the
warm greedy answer differs from the cold one)."""

from __future__ import annotations

import secrets
import tempfile
from pathlib import Path
from typing import Any

import click
import uvloop

from loadgen.client.errors import ClientError
from loadgen.client.openai import OpenAIClient
from loadgen.commands.options import (
    LAUNCH_OPTIONS,
    TARGET_OPTIONS,
    LaunchArgs,
    RunArgs,
    TargetArgs,
    api_option,
    usable_options,
)
from loadgen.engine.preflight import served_model, served_window
from loadgen.engine.probe_cache import (
    ProbeRefused,
    block_size_from_metrics,
    check_probe_flags,
    probe_cache,
    probe_line,
    probe_size,
)
from loadgen.engine.target import RunError
from loadgen.run_manifest import CacheCheck
from loadgen.server.boot import boot_server
from loadgen.server.launcher import ServerBootError
from loadgen.server.spec import ServerSpec

EXIT_DEAD = 1
EXIT_REFUSED = 2
EXIT_MISMATCH = 3


@click.command("probe-cache")
@TARGET_OPTIONS
@LAUNCH_OPTIONS
@click.option("--block-size", type=click.IntRange(min=1), default=None,
              help="Tokens per KV block, for a server that does not say (<= 13107; a "
                   "server that says another is refused).")  # fmt: skip
@click.option("--tokens", type=click.IntRange(min=1), default=None,
              help="Probe tokens, fixed (default: sized to 20x the server's TTFT floor, "
                   ">= 10 blocks, <= 131072 and the model window).")  # fmt: skip
@api_option("completions")
def probe_cache_cmd(
    target: TargetArgs,
    launch: LaunchArgs,
    block_size: int | None,
    tokens: int | None,
    api: str,
) -> None:
    """Send a prompt of >= 10 cache blocks twice, then the first again under greedy decoding.
    Healthy when the prefix-hit counter grew by the reusable blocks (TTFT under half of cold
    where the server counts no hits) and the repeat's answer equals the first's."""
    opts = usable_options(RunArgs(target, launch=launch), needs_url=True)
    spec, base_url, api_key, model = opts.server, opts.base_url, opts.api_key, opts.model
    try:
        check_probe_flags(tokens, block_size)
    except ProbeRefused as exc:
        click.echo(str(exc), err=True)
        raise click.exceptions.Exit(EXIT_REFUSED) from None
    probe_args = {"model": model, "block_size": block_size, "tokens": tokens, "api": api}
    try:
        check = uvloop.run(_probe(spec, base_url, api_key, probe_args))
    except ProbeRefused as exc:
        click.echo(str(exc), err=True)
        raise click.exceptions.Exit(EXIT_REFUSED) from None
    except ServerBootError as exc:
        # The first line says what failed; the server log's last lines and the command say why.
        raise click.ClickException(str(exc).rstrip()) from None
    except ClientError as exc:
        raise click.ClickException(str(exc).splitlines()[0]) from None
    click.echo(probe_line(check))
    code = {"dead": EXIT_DEAD, "inconclusive": EXIT_REFUSED, "mismatch": EXIT_MISMATCH}
    if check.verdict in code:
        raise click.exceptions.Exit(code[check.verdict])


async def _probe(
    spec: ServerSpec | None, base_url: str | None, api_key: str | None, args: dict[str, Any]
) -> CacheCheck:
    if spec is None:
        assert base_url is not None
        return await _probe_url(base_url, api_key, None, None, args)
    with tempfile.TemporaryDirectory(prefix="loadgen-probe-") as tmp:
        async with boot_server(spec, [], log_dir=Path(tmp)) as booted:
            facts = booted.server.facts
            source = facts.sources.get("block_size")
            return await _probe_url(
                booted.server.url, api_key, facts.block_size, source and f"server {source}", args
            )


async def _probe_url(
    url: str,
    api_key: str | None,
    known_block: int | None,
    known_source: str | None,
    args: dict[str, Any],
) -> CacheCheck:
    async with OpenAIClient(url, api_key=api_key, concurrency=1) as client:
        # /v1/models first: a server that is not there says "cannot connect" here.
        listing = await client.get_json("/v1/models")
        try:
            model = served_model(listing, args["model"], url)
        except RunError as exc:
            raise ProbeRefused(f"cache probe refused: {exc}") from None
        block, source = known_block, known_source
        if block is None:
            block = block_size_from_metrics(await _metrics_text(client))
            source = "vllm:cache_config_info"
        given = args["block_size"]
        if given is not None and block is not None and given != block:
            # The probe's threshold is blocks x the size: a wrong size judges the counters
            # against the wrong number of reusable tokens.
            raise ProbeRefused(f"cache probe refused: --block-size {given}, but the server says "
                               f"{block} ({source}); drop --block-size, which is for a server "
                               "that does not say")  # fmt: skip
        if block is None and given is not None:
            block, source = given, "--block-size"
        size = probe_size(args["tokens"], block, source, served_window(listing, model))
        # A fresh salt per probe: a prompt an earlier probe left in the cache would read warm.
        salt = f"probe-{secrets.token_hex(4)}"
        return await probe_cache(client, model=model, size=size, salt=salt, api=args["api"])


async def _metrics_text(client: OpenAIClient) -> str:
    try:
        return await client.get_text("/metrics")
    except ClientError:
        return ""
