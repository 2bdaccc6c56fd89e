"""The launcher's process handling against a stand-in server (a few lines of Python): readiness,
facts, boot failures with the log's tail, cancellation, and stopping the whole process group."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

import pytest

from loadgen.server.kinds import SERVER_KINDS
from loadgen.server.launcher import ServerBootError, launch, launch_sync
from loadgen.server.profile import Profile

# Prints vLLM-worded boot lines, starts a child that ignores SIGTERM (as a stuck engine core
# would), then crashes or serves /health and /v1/models as its mode says.
FAKE_SERVER = """\
import http.server, json, subprocess, sys
port, mode = int(sys.argv[1]), sys.argv[2]
print("INFO Chunked prefill is enabled with max_num_batched_tokens=512.", flush=True)
print("INFO CPU KV cache size: 1,024 tokens", flush=True)
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
print(f"child pid {child.pid}", flush=True)
if mode == "crash":
    print("error: unknown flag --bogus", flush=True)
    sys.exit(3)

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ok = mode == "serve" and self.path in ("/health", "/v1/models")
        body = json.dumps({"data": [{"id": "tiny-llama"}]}).encode() if ok else b""
        self.send_response(200 if ok else 503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


class FakeProfile(Profile):
    name = "fake"
    boot_timeout_s = 30.0
    default_flags = ((("--max-num-seqs",), ("3",)),)
    fact_flags: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "max_num_seqs": ("--max-num-seqs",),
        "max_num_batched_tokens": ("--budget",),
    }

    def __init__(self, mode: str = "serve") -> None:
        self.mode = mode

    def default_model(self) -> Path:
        return Path(__file__)

    def argv(self, *, port: int, model: Path, served_name: str, flags: Sequence[str]) -> list[str]:
        return [sys.executable, "-c", FAKE_SERVER, str(port), self.mode, *flags]


def child_pid(log_path: Path) -> int:
    for line in log_path.read_text().splitlines():
        if line.startswith("child pid "):
            return int(line.split()[-1])
    raise AssertionError(f"no child pid in {log_path}")


def is_gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state == "Z"  # dead, waiting for its new parent to reap it


def wait_gone(pid: int, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not is_gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_launch_sync_reads_facts_and_stops_the_whole_group(tmp_path):
    with launch_sync(FakeProfile(), flags=["--budget", "2048"], log_dir=tmp_path) as server:
        assert server.url.startswith("http://127.0.0.1:")
        assert server.model == "tiny-llama"
        assert server.flags == ("--max-num-seqs", "3", "--budget", "2048")
        assert server.log_path.parent == tmp_path
        # The boot log's budget wins over the flag's; the cap comes from the flags alone.
        assert (server.facts.max_num_batched_tokens, server.facts.max_num_seqs) == (512, 3)
        assert server.facts.kv_cache_tokens == 1024
        assert dict(server.facts.sources) == {
            "max_num_batched_tokens": "boot_log",
            "kv_cache_tokens": "boot_log",
            "max_num_seqs": "flags",
        }
        child = child_pid(server.log_path)
        assert not is_gone(child)
        proc = server.process
    assert proc.returncode is not None
    assert wait_gone(child), "the SIGTERM-ignoring child outlived the stop"


def test_exit_during_boot_raises_with_the_log_tail_and_stops_its_child(tmp_path):
    with pytest.raises(ServerBootError) as err, launch_sync(FakeProfile("crash"), log_dir=tmp_path):
        pass
    assert "exited with code 3 during boot" in str(err.value)
    assert "error: unknown flag --bogus" in str(err.value)
    # The command it ran is the message's last line, quoted to paste into a shell.
    assert f"\ncommand: {sys.executable} -c " in str(err.value)
    assert str(err.value).endswith(" crash --max-num-seqs 3")
    (log,) = tmp_path.glob("fake-*.log")
    assert wait_gone(child_pid(log)), "the crashed server's child outlived it"


def test_boot_timeout_stops_the_server(tmp_path):
    never_ready = launch_sync(FakeProfile("never-ready"), log_dir=tmp_path, boot_timeout_s=1.0)
    with pytest.raises(ServerBootError) as err, never_ready:
        pass
    assert "was not ready within 1 s" in str(err.value)
    (log,) = tmp_path.glob("fake-*.log")
    assert wait_gone(child_pid(log))


def test_unknown_profile_names_the_known_ones(tmp_path):
    assert {"llama.cpp", "sglang", "vllm", "sim"} <= set(SERVER_KINDS)
    known = f"unknown server kind 'tgi'; known: {', '.join(SERVER_KINDS)}"
    with pytest.raises(ValueError, match=re.escape(known)), launch_sync("tgi", log_dir=tmp_path):
        pass


async def test_async_launch_and_stop(tmp_path):
    async with launch(FakeProfile(), log_dir=tmp_path) as server:
        assert server.facts.max_num_seqs == 3
        child = child_pid(server.log_path)
    assert server.process.returncode is not None
    assert wait_gone(child)


async def test_cancelled_boot_stops_the_half_started_server(tmp_path):
    entered = False

    async def boot() -> None:
        nonlocal entered
        async with launch(FakeProfile("never-ready"), log_dir=tmp_path):
            entered = True

    task = asyncio.create_task(boot())
    log = await wait_for_log_line(tmp_path, "child pid ")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not entered
    assert wait_gone(child_pid(log))


async def wait_for_log_line(log_dir: Path, text: str, timeout_s: float = 10.0) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for log in log_dir.glob("*.log"):
            if text in log.read_text():
                return log
        await asyncio.sleep(0.02)
    raise AssertionError(f"no log line {text!r} in {log_dir}")


def test_a_server_that_ignores_sigterm_dies_with_its_launcher(tmp_path):
    """vLLM catches SIGTERM; when loadgen is killed, its server must go all the same."""
    launcher = (
        "import sys; from pathlib import Path; from loadgen.server.launcher import _spawn\n"
        "code = 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "time.sleep(600)'\n"
        "proc = _spawn([sys.executable, '-c', code], {}, Path(sys.argv[1]))\n"
        "print(proc.pid, flush=True)\n"
        "import time; time.sleep(600)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", launcher, str(tmp_path / "server.log")], stdout=subprocess.PIPE
    )
    try:
        server_pid = int(parent.stdout.readline())
        assert not is_gone(server_pid)
        parent.kill()
        parent.wait(timeout=10)
        assert wait_gone(server_pid, timeout_s=10), "the server outlived its killed launcher"
    finally:
        parent.kill()
        parent.stdout.close()


def test_a_real_server_needs_a_model_and_a_path_must_exist(tmp_path):
    class NoModel(FakeProfile):
        def default_model(self) -> Path | None:
            return None

    with pytest.raises(ServerBootError, match=r"fake: no model given: pass --model-path DIR"):
        launch_sync(NoModel(), log_dir=tmp_path).__enter__()
    missing = tmp_path / "nope"
    with pytest.raises(ServerBootError, match=rf"fake: model {missing} does not exist"):
        launch_sync(NoModel(), log_dir=tmp_path, model=missing).__enter__()


def test_a_model_by_name_is_passed_to_the_server_unchecked(tmp_path):
    class Named(FakeProfile):
        def argv(self, *, port, model, served_name, flags):
            return [*super().argv(port=port, model=model, served_name=served_name, flags=flags),
                    "--model", str(model)]  # fmt: skip

    with launch_sync(Named(), log_dir=tmp_path, model="org/some-model") as server:
        assert server.argv[-2:] == ("--model", "org/some-model")
