"""Starts a real inference server on a free loopback port, waits until it serves, reads its
limits back, and stops it (only its own process group).

    async with launch("vllm", flags=["--max-num-seqs", "2"], log_dir=tmp) as server:
        server.url, server.model, server.facts, server.log_path, server.pid

`launch_sync` is the same for synchronous code (module-scoped test fixtures). The server runs in
a new session, so stopping signals its whole process group (vLLM's engine core included) and
nothing else: SIGTERM, then SIGKILL after a grace period.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import dataclasses
import json
import os
import shlex
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict, Unpack

from loadgen.client.endpoint import Timeouts
from loadgen.client.errors import read_capped_sync
from loadgen.lifeline import PARENT_PID_ENV, die_with_parent, release_group, watch_group
from loadgen.server import installs
from loadgen.server.bootlog import parse_boot_log, parse_boot_notes
from loadgen.server.kinds import kind_profile
from loadgen.server.profile import Layer, Profile, ServerFacts, merge_facts

STOP_GRACE_S = 10.0
_POLL_S = 0.2
_LOG_TAIL_LINES = 40
_PORT_ATTEMPTS = 3


class ServerBootError(RuntimeError):
    """The server exited, timed out or was cancelled before it served; the message holds the
    tail of its boot log."""


@dataclass(frozen=True)
class Server:
    """A running server. `boot_ns` is from the process start to the first /v1/models answer."""

    profile: str
    url: str
    model: str
    facts: ServerFacts
    log_path: Path
    pid: int
    argv: tuple[str, ...]
    flags: tuple[str, ...]
    boot_ns: int
    process: subprocess.Popen[bytes] = field(repr=False, compare=False)

    def stop(self, grace_s: float = STOP_GRACE_S) -> int:
        """Stops the server's process group; returns the server's exit code."""
        _RUNNING.discard(self.process)
        return stop_process_group(self.process, grace_s)


# Servers not stopped yet: stopped at interpreter exit should a caller forget.
_RUNNING: set[subprocess.Popen[bytes]] = set()


@atexit.register
def _stop_forgotten() -> None:
    for proc in list(_RUNNING):
        stop_process_group(proc, grace_s=2.0)


def stop_process_group(proc: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> int:
    """SIGTERM to the process group the server leads, SIGKILL to what is left after the grace
    (or once the leader is gone: a child such as vLLM's engine core may outlive it). Returns
    the server's exit code.

    The leader is reaped only after the SIGKILL, so the group's id cannot have been reused.
    """
    if proc.returncode is not None:
        release_group(proc.pid)
        return proc.returncode  # reaped already: its id may belong to another process now
    pgid = proc.pid  # start_new_session made the server its group's leader
    _signal_group(pgid, signal.SIGTERM)
    _wait_exited(proc, grace_s)
    _signal_group(pgid, signal.SIGKILL)
    code = proc.wait()
    release_group(pgid)
    return code


def has_exited(proc: subprocess.Popen[bytes]) -> bool:
    """Whether the process has exited, without reaping it (its id stays reserved)."""
    if proc.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None
    except ChildProcessError:
        return True


def _wait_exited(proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not has_exited(proc) and time.monotonic() < deadline:
        time.sleep(0.02)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def free_port() -> int:
    """A loopback port free right now (bind port 0); the server binds it a moment later."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _http_get(url: str, timeout_s: float | None = Timeouts.meta_s) -> tuple[int, str]:
    """(status, body); status 0 when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return resp.status, read_capped_sync(resp, url).decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, ""
    except (OSError, TimeoutError):
        return 0, ""


def _serves_model(models_body: str, model: str) -> bool:
    try:
        data = json.loads(models_body).get("data", [])
    except (ValueError, AttributeError):
        return False
    return any(isinstance(m, dict) and m.get("id") == model for m in data)


def _boot_error(
    profile: str, why: str, log_path: Path, argv: Sequence[str] = ()
) -> ServerBootError:
    command = f"\ncommand: {shlex.join(argv)}" if argv else ""
    return ServerBootError(
        f"{profile} server {why}; last lines of {log_path}:\n{log_tail(log_path)}{command}"
    )


def wait_ready(
    proc: subprocess.Popen[bytes],
    *,
    profile: str,
    url: str,
    model: str,
    log_path: Path,
    timeout_s: float,
    cancel: threading.Event | None = None,
    argv: Sequence[str] = (),
) -> None:
    """Returns once /health answers 200 and /v1/models lists `model`; raises ServerBootError
    when the process exits, the timeout passes or `cancel` is set."""
    deadline = time.monotonic() + timeout_s
    while True:
        if has_exited(proc):
            code = stop_process_group(proc)  # its children may still run
            raise _boot_error(profile, f"exited with code {code} during boot", log_path, argv)
        if cancel is not None and cancel.is_set():
            raise _boot_error(profile, "boot was cancelled", log_path, argv)
        if time.monotonic() > deadline:
            why = f"was not ready within {timeout_s:.0f} s (raise server.boot_timeout_s)"
            raise _boot_error(profile, why, log_path, argv)
        if _http_get(f"{url}/health")[0] == 200:
            status, body = _http_get(f"{url}/v1/models")
            if status == 200 and _serves_model(body, model):
                return
        # A readiness poll: the condition is re-checked each round, nothing races on the sleep.
        time.sleep(_POLL_S)


def read_facts(profile: Profile, *, url: str, log_path: Path, flags: Sequence[str]) -> ServerFacts:
    """The server's limits: what it logged, then what it answers for (vLLM's cache_config_info
    metric, SGLang's /server_info), then the flags."""
    text = log_path.read_text(errors="replace")
    queried = profile.queried_facts(lambda path: _http_get(url + path))
    layers: list[Layer] = [
        ("boot_log", parse_boot_log(text)),
        *queried,
        ("flags", profile.flag_facts(flags)),
    ]
    notes = parse_boot_notes(text)
    facts = merge_facts(layers, notes)
    if defaults := profile.default_facts(facts, flags):
        facts = merge_facts([*layers, ("server_default", defaults)], notes)
    return dataclasses.replace(facts, unknown=profile.unknown_reasons(facts))


def server_profile(name: str | Profile) -> Profile:
    """The profile itself, or a kind's profile from the installs found here."""
    return name if isinstance(name, Profile) else kind_profile(name)


def _spawn(argv: Sequence[str], env: Mapping[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env, PARENT_PID_ENV: str(os.getpid())},
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )
    _RUNNING.add(proc)
    try:
        watch_group(proc.pid)
    except BaseException:
        _RUNNING.discard(proc)
        stop_process_group(proc)
        raise
    return proc


def _lost_port_race(log_path: Path) -> bool:
    return "address already in use" in log_tail(log_path).lower()


def start_server(
    profile: str | Profile,
    *,
    flags: Sequence[str] = (),
    log_dir: Path,
    model: Path | str | None = None,
    served_name: str = installs.TINY_MODEL_NAME,
    boot_timeout_s: float | None = None,
    cancel: threading.Event | None = None,
) -> Server:
    """Starts the server and returns once it serves; the caller must `stop()` it. `model`: a
    path (must exist), or a str: a name the server resolves itself (its local cache)."""
    prof = server_profile(profile)
    model_path = _model_of(prof, model)
    try:
        effective = prof.effective_flags(flags)
        timeout_s = boot_timeout_s if boot_timeout_s is not None else prof.default_boot_timeout_s()
    except installs.InstallNotFound as exc:
        raise ServerBootError(f"{prof.name}: {exc}") from None
    state = installs.state_dir(prof.name)
    state.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, _PORT_ATTEMPTS + 1):
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log_path = log_dir / f"{prof.name}-{port}.log"
        argv = prof.argv(port=port, model=model_path, served_name=served_name, flags=effective)
        t0 = time.perf_counter_ns()
        proc = _spawn(argv, {**prof.env(state), **dict(prof.extra_env)}, log_path)
        try:
            wait_ready(
                proc,
                profile=prof.name,
                url=url,
                model=served_name,
                log_path=log_path,
                timeout_s=timeout_s,
                cancel=cancel,
                argv=argv,
            )
            boot_ns = time.perf_counter_ns() - t0
            facts = read_facts(prof, url=url, log_path=log_path, flags=effective)
        except ServerBootError:
            _RUNNING.discard(proc)
            stop_process_group(proc)
            # Another process took the port between our check that it was free and the server's
            # bind.
            if attempt < _PORT_ATTEMPTS and _lost_port_race(log_path):
                continue
            raise
        except BaseException:
            _RUNNING.discard(proc)
            stop_process_group(proc)
            raise
        return Server(
            profile=prof.name,
            url=url,
            model=served_name,
            facts=facts,
            log_path=log_path,
            pid=proc.pid,
            argv=tuple(argv),
            flags=tuple(effective),
            boot_ns=boot_ns,
            process=proc,
        )
    raise AssertionError("unreachable: the last attempt returns or raises")


def _model_of(prof: Profile, model: Path | str | None) -> Path:
    if isinstance(model, str):
        return Path(model)
    found = model if model is not None else prof.default_model()
    if found is None:
        raise ServerBootError(
            f"{prof.name}: no model given: pass --model-path DIR (or --model NAME for one in "
            f"the server's cache; scenario server.model_path)"
        )
    if not found.exists():
        raise ServerBootError(f"{prof.name}: model {found} does not exist (--model-path)")
    return found


class StartArgs(TypedDict, total=False):
    """start_server's options past the profile and log folder, forwarded as they are by
    launch_sync and launch (start_server says what each means and its default)."""

    flags: Sequence[str]
    model: Path | str | None
    served_name: str
    boot_timeout_s: float | None


@contextlib.contextmanager
def launch_sync(
    profile: str | Profile, *, log_dir: Path, **start: Unpack[StartArgs]
) -> Iterator[Server]:
    """A running server for the `with` block; stopped on the way out, also on error."""
    server = start_server(profile, log_dir=log_dir, **start)
    try:
        yield server
    finally:
        server.stop()


@contextlib.asynccontextmanager
async def launch(
    profile: str | Profile, *, log_dir: Path, **start: Unpack[StartArgs]
) -> AsyncIterator[Server]:
    """A running server for the `async with` block; stopped on the way out, also on error or
    cancellation (a cancelled boot stops the half-started server before re-raising)."""
    cancel = threading.Event()
    boot = asyncio.ensure_future(
        asyncio.to_thread(start_server, profile, log_dir=log_dir, cancel=cancel, **start)
    )
    try:
        server = await asyncio.shield(boot)
    except asyncio.CancelledError:
        cancel.set()
        # The boot thread cannot be interrupted: let it see `cancel` and stop its process.
        with contextlib.suppress(ServerBootError):
            late = await boot
            late.stop()
        raise
    try:
        yield server
    finally:
        await asyncio.to_thread(server.stop)
