"""A real server process on 127.0.0.1 SIGKILLed mid-run (issue 32): the streams it dropped are
error records and a soak ends "server unreachable", never a traceback out of the engine. The
same runs against a server left alive record no such error."""

from __future__ import annotations

from pathlib import Path

import orjson

from loadgen.commands.run import FAILED_STREAMS_EXIT
from loadgen.records import read_streams

from support.server_process import run_until, sim_process

# soak_steady's 1,000-token prompts on the sim at 20x, four streams a rep: killed after 22
# records, streams are in flight on connections an earlier stream used. Before the fix 6 of 6
# of these runs died with a traceback (ValueError from the closed socket's TCP_INFO read;
# a warm-up's write to a closed uvloop handle raised RuntimeError in the field).
SIM_ARGS = ("--speed", "20", "--profile", "rtx4090-long")
KILL_AFTER = 22
# The reasons a stream ends when its server is killed: reset mid-stream, refused after.
GONE = {"connection_closed", "connect_error"}


def only_run(out: Path) -> Path:
    (run_dir,) = list(out.iterdir())
    return run_dir


SOAK = ["soak", "soak_steady", "--duration", "1h"]
RUN = ["run", "soak_steady", "--set", "groups.steady.count=16", "--set", "repetitions=3"]


def _soak_end(run_dir: Path) -> dict:
    return orjson.loads((run_dir / "run.json").read_bytes())["soak_end"]


def test_a_soak_whose_server_is_killed_ends_server_unreachable(tmp_path: Path) -> None:
    with sim_process(tmp_path / "sim.log", *SIM_ARGS) as (sim, url):
        rc, err = run_until(KILL_AFTER, [*SOAK, "--base-url", url], tmp_path / "out", kill=sim)
    assert "Traceback" not in err, err
    run_dir = only_run(tmp_path / "out")
    recs = list(read_streams(run_dir))
    assert sum(r.status == "ok" for r in recs) >= KILL_AFTER
    failed = {r.error.cls for r in recs if r.error is not None}
    assert failed <= GONE, failed
    # Killed mid-stream or between streams (the next warm-up finds nothing listening, every
    # stream ok), the soak never ran its hour: it fails either way, and says why.
    assert rc == FAILED_STREAMS_EXIT, err
    assert ("streams failed" if failed else "the soak ended early: server unreachable") in err
    assert _soak_end(run_dir)["reason"] == "server unreachable"


def test_a_run_whose_server_is_killed_records_the_dropped_streams(tmp_path: Path) -> None:
    with sim_process(tmp_path / "sim.log", *SIM_ARGS) as (sim, url):
        rc, err = run_until(KILL_AFTER, [*RUN, "--base-url", url], tmp_path / "out", kill=sim)
    assert "Traceback" not in err, err
    run_dir = only_run(tmp_path / "out")
    recs = list(read_streams(run_dir))
    assert sum(r.status == "ok" for r in recs) >= KILL_AFTER
    if rc == FAILED_STREAMS_EXIT:  # killed inside a rep: its dropped streams are records
        assert {r.error.cls for r in recs if r.error is not None} <= GONE
        assert (run_dir / "summary.json").is_file()
    else:  # killed between reps: the next rep's warm-up says so in one line
        assert rc == 1, err
        (line,) = [x for x in err.splitlines() if x.startswith("Error:")]
        assert f"cannot connect to {url}" in line


def test_the_same_soak_and_run_against_a_live_server_record_no_error(tmp_path: Path) -> None:
    with sim_process(tmp_path / "sim.log", *SIM_ARGS) as (_, url):
        soak_rc, soak_err = run_until(
            KILL_AFTER,
            [*SOAK[:2], "--duration", "3s", "--base-url", url],
            tmp_path / "soak",
            kill=None,
        )
        run_rc, run_err = run_until(
            KILL_AFTER, [*RUN, "--base-url", url], tmp_path / "run", kill=None
        )
    assert (soak_rc, run_rc) == (0, 0), soak_err + run_err
    for out in ("soak", "run"):
        recs = list(read_streams(only_run(tmp_path / out)))
        assert len(recs) >= KILL_AFTER and all(r.status == "ok" for r in recs)
    assert _soak_end(only_run(tmp_path / "soak"))["reason"] == "duration reached"
