"""One definition of planned / measured / limited, read by the header, the banner, the verdict
table and summary.json alike (issue 18 item 5)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from loadgen.analysis.summary import RecordCounts, analyze_run, record_counts
from loadgen.report.cmd import render_report
from loadgen.run_manifest import RunManifest

from support.run_fixtures import manifest, ns, stream, write_run
from support.virtual import run_virtual

COUNT_KEYS = ("planned", "measured", "missing", "not_measured", "limited", "beyond_tolerance")


def counts_of(summary: dict) -> tuple:
    """The records block's counts, in COUNT_KEYS order."""
    return tuple(summary["run"]["records"][k] for k in COUNT_KEYS)


def line(text: str, start: str) -> str:
    return next(x for x in text.splitlines() if x.startswith(start))


async def test_agent_sessions_plans_its_session_turns(tmp_path: Path) -> None:
    # 8 sessions of 4 turns: the plan holds no plain requests, so planned read 0 before.
    run = await run_virtual("agent_sessions", [], tmp_path, seed=7)
    assert counts_of(run.summary) == (32, 32, 0, 0, 0, 0)
    text = render_report(run.run_dir)
    assert "records: 32 measured of 32 planned" in text
    assert line(text, "streams:").startswith("streams: 32 measured (32 ok, 0 errors) | wall")
    assert "CLIENT LIMITED" not in text


async def test_deep_decode_names_its_unmeasured_records_by_phase(tmp_path: Path) -> None:
    # 3 measured streams beside 9 records of the cache check: "3 measured ... of 12" once read
    # as 12 planned beside "3 of 3 planned".
    run = await run_virtual("deep_decode", [], tmp_path, seed=7)
    assert counts_of(run.summary) == (3, 3, 0, 9, 0, 0)
    assert run.summary["run"]["streams"]["by_phase"] == {
        "measure": 3, "prime": 3, "probe": 3, "repeat": 3,
    }  # fmt: skip
    text = render_report(run.run_dir)
    assert "records: 3 measured of 3 planned" in text
    assert line(text, "streams:").startswith(
        "streams: 3 measured (3 ok, 0 errors) + 3 prime, 3 probe, 3 repeat (not measured) |"
    )


def test_the_banner_counts_what_the_verdict_table_counts(tmp_path: Path) -> None:
    bad = dataclasses.replace(stream("bad", chunks=[0.1, 0.2, 0.3]), loop_lag_ttft_ns=ns(0.05))
    good = dataclasses.replace(stream("good", chunks=[0.1, 0.2, 0.3]), loop_lag_ttft_ns=ns(0.001))
    run = write_run(tmp_path / "run", [bad, good], run=manifest(planned_streams=2))
    summary = analyze_run(run).summary
    table = summary["run"]["verdicts"].get("client_limited", 0)
    assert table == 1 == summary["run"]["records"]["limited"]
    assert summary["run"]["client_limited_streams"] == table
    assert summary["run"]["client_limits"] == {
        "measured": 2, "limited": table, "beyond_tolerance": 0, "loop_lag_max_ms": None,
        "crowding": None, "loop_lag_limit_ms": 50.0, "send_late": {},
    }  # fmt: skip
    assert render_report(run).startswith(f"!! CLIENT LIMITED: {table} of 2 streams")


def test_no_banner_when_no_stream_is_limited(tmp_path: Path) -> None:
    good = dataclasses.replace(stream("good", chunks=[0.1, 0.2, 0.3]), loop_lag_ttft_ns=ns(0.001))
    run = write_run(tmp_path / "run", [good], run=manifest(planned_streams=1))
    summary = analyze_run(run).summary
    assert summary["run"]["records"]["limited"] == 0
    assert not summary["run"]["client_limited"]
    assert "CLIENT LIMITED" not in render_report(run)


def test_a_timing_error_under_a_server_verdict_is_named_beside_not_added() -> None:
    recs = [stream(i, chunks=[0.1, 0.2]) for i in ("a", "b", "c")]
    recs.append(stream("w", chunks=[0.1, 0.2], phase="warmup"))
    rows = {
        "a": {"verdict": "client_limited", "evidence": {"client_error": {}}},
        "b": {"verdict": "prefill_hol", "evidence": {"client_error": {}}},
        "c": {"verdict": "admitted", "evidence": {}},
    }
    assert record_counts(RunManifest(planned_streams=4), recs, rows) == RecordCounts(
        planned=4, measured=3, not_measured=1, limited=1, beyond_tolerance=1
    )
    assert RecordCounts(4, 3, 1, 1, 1).missing == 1
    assert RecordCounts(None, 3, 0, 0, 0).missing is None


def test_a_sweep_names_each_arms_client_limited_count_and_stays_quiet_without() -> None:
    from loadgen.analysis.selferror import ClientLimits
    from loadgen.report.banners import sweep_client_banner

    arms = {"c=4": ClientLimits(300, 3, loop_lag_max_ms=80.0), "c=8": ClientLimits(300, 0, 2)}
    assert sweep_client_banner(arms) == (
        "!! CLIENT LIMITED: c=4: 3 of 300 streams client_limited; c=4: event-loop lag max "
        "80.0 ms > 50 ms; c=8: 2 of 300 streams timed beyond tolerance kept their server verdict "
        "(not counted as client_limited)"
    )
