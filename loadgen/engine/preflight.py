"""Checks made before a run creates anything: the output folder is writable and an external
server answers. A run that cannot start fails here in one line, leaving no run directory."""

from __future__ import annotations

import os
import resource
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from loadgen.client.endpoint import Timeouts
from loadgen.client.errors import HTTPStatusError
from loadgen.client.openai import AUX_CONNECTIONS, OpenAIClient
from loadgen.client.rawhttp import FDS_PER_CONNECTION
from loadgen.engine.target import RunError
from loadgen.redact import redact_url
from loadgen.scenario.datasets import DatasetError, scenario_in_window
from loadgen.scenario.limits import sim_window, window_problem
from loadgen.scenario.plan import Plan, plan


def check_out_root(out_root: Path, flag: str = "--out") -> None:
    """Creates `out_root` if needed; RunError (one line, naming `flag`) when it cannot hold
    what the run writes there."""
    try:
        out_root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunError(f"{flag} {out_root}: cannot create it ({exc.strerror or exc})") from None
    if not os.access(out_root, os.W_OK | os.X_OK):
        raise RunError(f"{flag} {out_root}: not writable (pick a folder you can write to)")


def check_named_dir(path: Path) -> None:
    """RunError (one line) when the run directory named by --out already holds files: records
    append, so a second run there would read back as one run with the first's streams."""
    if path.is_dir() and any(path.iterdir()):
        raise RunError(
            f"--out {path}: already holds files (a run directory takes one run; "
            "name a new folder or remove this one)"
        )


async def list_models(base_url: str, api_key: str | None, connect_s: float | None) -> Any:
    """GET /v1/models of an external server: proves it answers before anything is written.
    Raises ClientError (ServerUnreachable when nothing listens) with a one-line message."""
    timeouts = Timeouts(connect_s=connect_s or Timeouts.connect_s)
    async with OpenAIClient(base_url, api_key=api_key, concurrency=1, timeouts=timeouts) as c:
        return await c.get_json("/v1/models")


# Descriptors beyond the stream connections: aux connections, run files, logs, the event loop.
FD_MARGIN = 64


def ensure_fd_limit(concurrency: int) -> int:
    """Makes sure `concurrency` streams can be open at once: raises the soft RLIMIT_NOFILE when
    the hard limit allows, else RunError with the numbers (running out mid-run fails every
    later connect, and the server would be blamed for it). Returns the soft limit in force."""
    needed = concurrency * FDS_PER_CONNECTION + AUX_CONNECTIONS + FD_MARGIN
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return soft
    if hard == resource.RLIM_INFINITY or hard >= needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
        return needed
    raise RunError(
        f"{concurrency} concurrent streams need {needed} open files, but the limit is {soft} "
        f"(hard {hard}): raise it (ulimit -n {needed}) or lower the concurrency"
    )


def model_cards(listing: Any) -> list[dict[str, Any]]:
    """The cards of a /v1/models listing that name a model (a string `id`), in its order."""
    data = listing.get("data") if isinstance(listing, dict) else None
    return [m for m in data or [] if isinstance(m, dict) and isinstance(m.get("id"), str)]


def served_model(listing: Any, wanted: str | None, target: str) -> str:
    """The model to send: `wanted` when the server lists it (or lists nothing to check it
    against), else the first listed. RunError in one line, naming what is served, when the
    server lists models and `wanted` is not one: a wrong --model was sent 200 times, each a
    404. A server without /v1/models is the caller's to judge (it has no listing)."""
    ids = [str(card["id"]) for card in model_cards(listing)]
    shown = redact_url(target)
    if wanted is None:
        if not ids:
            raise RunError(f"{shown}/v1/models lists no models; pass --model")
        return ids[0]
    if ids and wanted not in ids:
        raise RunError(f"model {wanted!r} is not served by {shown}; it serves: {', '.join(ids)}")
    return wanted


async def checked_model(
    listing: Awaitable[Any], wanted: str | None, target: str
) -> tuple[str, Any]:
    """The model to send (served_model) and the /v1/models listing it was checked against. A
    server that answers /v1/models with an HTTP error (a proxy that lists none) is sent
    `wanted` unchecked, with an empty listing (so no window either); without `wanted` its
    error stands, as there is nothing to send."""
    try:
        got = await listing
    except HTTPStatusError:
        if wanted is None:
            raise
        return wanted, {}
    return served_model(got, wanted, target), got


def served_window(listing: Any, model: str | None) -> int | None:
    """`max_model_len` of the model in a /v1/models listing (vLLM gives it), else None."""
    models = model_cards(listing)
    chosen = next((m for m in models if m.get("id") == model), models[0] if models else None)
    window = chosen.get("max_model_len") if chosen else None
    return window if isinstance(window, int) and not isinstance(window, bool) else None


def fit_datasets(
    the_plan: Plan, window: int | None, target: str, warn: Callable[[str], None]
) -> Plan:
    """The plan drawn again without the dataset rows that cannot fit `window` (`too_long:
    skip`, each skip counted in run.json's dataset block and said here); RunError naming the
    first such row under `too_long: refuse`, before anything is sent."""
    if window is None:
        return the_plan
    try:
        fitted = scenario_in_window(the_plan.scenario, window, target)
    except DatasetError as exc:
        raise RunError(str(exc)) from None
    if fitted is the_plan.scenario:
        return the_plan
    for g in fitted.groups:
        d = g.prompt.dataset
        if d is not None and d.skipped:
            warn(f"groups.{g.name}: {d.skipped} of {len(d.rows) + d.skipped} rows of {d.path} "
                 f"exceed {target}'s max_model_len {window}: skipped (too_long: skip)")  # fmt: skip
    return plan(fitted, run_seed=the_plan.seed)


def check_windows(plan: Plan, window: int | None, target: str) -> None:
    """RunError when a request of any arm cannot fit an external server's context window
    (nothing to check when the server did not say)."""
    for arm in plan.arms:
        problem = window and window_problem(arm.scenario, window, redact_url(target))
        if problem:
            raise RunError(problem)


def check_sim_windows(plan: Plan, sim: str = "the built-in sim") -> None:
    """RunError when a request of any arm cannot fit the window of the sim named `sim` (the
    arm's max_model_len)."""
    for arm in plan.arms:
        window = arm.flags.get("max_model_len") or sim_window(arm.scenario)
        problem = window_problem(arm.scenario, window, sim)
        if problem:
            raise RunError(problem)
