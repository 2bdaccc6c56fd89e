"""Whatever stops `loadgen run`, every sent stream keeps a record and no child outlives it."""

from __future__ import annotations

import os
import re
import signal
import time
import urllib.request
from pathlib import Path

import orjson
import pytest

from loadgen.server.launcher import launch_sync
from loadgen.server.sim import SimProfile

from support.cli import spawn_loadgen

WAIT_S = 60.0


def _wait_for(what: str, ready, timeout_s: float = WAIT_S) -> None:
    """Polls `ready()` until it holds; a readiness poll, nothing races on the sleep."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _records(out: Path) -> list[dict]:
    (run_dir,) = out.iterdir()
    lines = (run_dir / "streams.jsonl").read_bytes().splitlines()
    return [orjson.loads(line) for line in lines]


def _sim_requests(url: str) -> list[dict]:
    with urllib.request.urlopen(f"{url}/sim/requests", timeout=10) as resp:
        return orjson.loads(resp.read())


@pytest.mark.parametrize(
    ("stop", "workers"),
    [("sigterm", 1), ("sigterm", 2), ("ctrl_c", 2)],
    ids=["sigterm", "sigterm_to_the_parent_of_2_workers", "ctrl_c_to_2_workers"],
)
def test_a_stop_keeps_a_cancelled_record_for_every_sent_stream(
    stop: str, workers: int, tmp_path: Path
) -> None:
    # A fast sim in its own process keeps loadgen busy decoding, so the signal lands while a
    # stream's own code runs: a KeyboardInterrupt raised there used to lose that record.
    # A pool large enough for all 13 at once (16 x 8k tokens), so none waits for another.
    # SIGTERM reaches loadgen alone (it stops its workers); Ctrl-C reaches the whole group.
    flags = ["--max-num-seqs", "16", "--num-gpu-blocks", "8192"]
    with launch_sync(SimProfile(), flags=flags, log_dir=tmp_path / "sim", served_name="m") as sim:
        proc = spawn_loadgen(
            ["run", "smoke", "--base-url", sim.url, "--out", tmp_path / "runs", "--no-progress",
             "--set=groups.short.count=12", "--set=groups.short.max_tokens=7900",
             "--set=groups.long.max_tokens=7900", "--workers", str(workers)],
            start_new_session=True,
        )  # fmt: skip
        try:
            _wait_for("13 streams decoding", lambda: _decoding(sim.url) >= 13)
            if stop == "ctrl_c":
                os.killpg(proc.pid, signal.SIGINT)
            else:
                proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=WAIT_S)
        finally:
            proc.kill()
        sent = {r["client_request_id"] for r in _sim_requests(sim.url)}
    # On main this failed 2 of 5 tries (exit 1 "Aborted!", or a transport traceback): the
    # KeyboardInterrupt landed wherever loadgen was at the signal.
    assert proc.returncode == (130 if stop == "ctrl_c" else 143), err
    assert "Traceback" not in err and "Fatal error" not in err, err
    records = _records(tmp_path / "runs")
    assert len(sent) == 13
    assert sorted(r["id"] for r in records) == sorted(sent)
    errors = [r["error"]["class"] for r in records if r["error"]]
    assert errors and set(errors) == {"cancelled"}


def _decoding(url: str) -> int:
    return sum(r["first_token_s"] is not None for r in _sim_requests(url))


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(c) for c in (task / "children").read_text().split()]
    return out


def _gone(pid: int) -> bool:
    """Exited (a zombie waiting for its new parent to reap it counts as exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def test_sigkill_of_run_leaves_no_sim_behind(tmp_path: Path) -> None:
    # A sim at 1/20 speed keeps the run going for many seconds: the kill lands mid-run.
    proc = spawn_loadgen(
        ["run", "smoke", "--set", "sim.speed=0.05", "--out", tmp_path, "--no-progress"]
    )
    sims: list[int] = []
    try:
        _wait_for("the sim process", lambda: bool(_children(proc.pid)))
        sims = _children(proc.pid)
        _wait_for("the sim log", lambda: any(tmp_path.glob("*/sim-*.log")))
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=WAIT_S)
        # The kernel's parent-death signal is immediate; the sim's own watch polls each 0.5 s.
        _wait_for("the sim to exit after loadgen died", lambda: all(map(_gone, sims)), 15.0)
    finally:
        proc.kill()
        for pid in sims:
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)


def _lines(path: Path) -> int:
    return len(path.read_bytes().splitlines()) if path.exists() else 0


@pytest.mark.parametrize(
    ("args", "sig", "code"),
    [
        (["run", "smoke", "--clock", "virtual", "--set=repetitions=20000"], signal.SIGTERM, 143),
        (["run", "smoke", "--clock", "virtual", "--set=repetitions=20000"], signal.SIGINT, 130),
        (["soak", "smoke", "--duration", "10h"], signal.SIGTERM, 143),
    ],
    ids=["run_sigterm", "run_ctrl_c", "soak_10h_sigterm"],
)
def test_the_virtual_clock_yields_to_a_stop(
    args: list[str], sig: signal.Signals, code: int, tmp_path: Path
) -> None:
    # Each plan runs minutes on the virtual clock (80,000 streams; a 10 h soak to its request
    # cap): before the loop yielded to signals, one ran 125 s until SIGKILL.
    out = tmp_path / "runs"
    proc = spawn_loadgen([*args, "--out", out, "--no-progress"])
    try:
        _wait_for("records", lambda: any(_lines(p) > 10 for p in out.glob("*/streams.jsonl")))
        proc.send_signal(sig)
        stdout, err = proc.communicate(timeout=WAIT_S)
    finally:
        proc.kill()
    assert proc.returncode == code, err
    assert "Traceback" not in err and "interrupted: records written so far are kept" in err
    (run_dir,) = out.iterdir()
    manifest = orjson.loads((run_dir / "run.json").read_bytes())
    assert manifest["interrupted"] is True
    recorded = len(_records(out))
    assert 10 < recorded < 80_000
    # The report of what was recorded, printed and written.
    assert f"run directory: {run_dir}" in stdout
    assert (run_dir / "report.txt").exists() and (run_dir / "report.html").exists()
    if args[0] == "run":
        summary = orjson.loads((run_dir / "summary.json").read_bytes())
        assert summary["run"]["interrupted"] is True
        assert summary["run"]["records"]["measured"] == recorded


def test_a_stopped_bench_prints_and_writes_what_finished_but_saves_no_result(
    tmp_path: Path,
) -> None:
    # A stop ended `bench serve` with loadgen's report alone: no bench block, no
    # bench_result.json. A --save-result file of a cut run would pass for a whole one.
    out, saved = tmp_path / "runs", tmp_path / "res"
    proc = spawn_loadgen(
        ["bench", "serve", "--clock", "virtual", "--num-prompts", "20000", "--random-input-len",
         "32", "--random-output-len", "4", "--max-concurrency", "8", "--out", out,
         "--disable-tqdm", "--save-result", "--result-dir", saved]
    )  # fmt: skip
    try:
        _wait_for("records", lambda: any(_lines(p) > 10 for p in out.glob("*/streams.jsonl")))
        proc.send_signal(signal.SIGINT)
        stdout, err = proc.communicate(timeout=WAIT_S)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert err.rstrip().endswith(
        "interrupted: bench_result.json holds the requests that finished; no --save-result "
        "file, the run did not finish"
    )
    (run_dir,) = out.iterdir()
    result = orjson.loads((run_dir / "bench_result.json").read_bytes())
    ok = sum(r["status"] == "ok" for r in _records(out))
    assert 10 < ok < 20_000 and (result["completed"], result["num_prompts"]) == (ok, 20_000)
    assert re.search(rf"^Successful requests: +{ok} *$", stdout, re.M)
    assert f"run directory: {run_dir}" in stdout
    assert saved.is_dir() and not any(saved.iterdir())


def test_a_stop_after_the_work_ended_while_its_loop_closes_still_stops() -> None:
    # A Ctrl-C landing after the run's work ended but before its loop closed went unheard: the
    # run went on to its report and exited 0, 2.5 s after the stop.
    import asyncio

    import uvloop

    from loadgen.commands.run import Stopped, until_stopped

    async def work() -> str:
        return "done"

    async def ended_then_stopped() -> None:
        assert await asyncio.ensure_future(until_stopped(work())) == "done"
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.sleep(WAIT_S)  # the stop's handler raises out of the loop before this ends

    with pytest.raises(Stopped) as stopped:
        uvloop.run(ended_then_stopped())
    assert stopped.value.signal == signal.SIGINT
