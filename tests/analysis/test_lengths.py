"""Honest lengths: prompt tokens asked, sent and counted, output tokens requested and delivered,
per stream; the SHORT OUTPUT and PROMPT DRIFT banners fire when they must and only then."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from click.testing import CliRunner

from loadgen.analysis.lengths import prompt_drift, short_output
from loadgen.cli import main
from loadgen.records import StreamRecord, read_streams
from loadgen.report.cmd import render_report
from loadgen.sim.faults import parse_fault_options

from support.paths import DATA
from support.run_fixtures import stream, ticks
from support.virtual import run_virtual

UNIFORM = DATA / "scenarios" / "verdict_uniform.yaml"


def _out(rid: str, requested: int, delivered: int, **kw: object) -> StreamRecord:
    rec = stream(rid, chunks=ticks(1.0, 3, 0.01), completion=delivered)
    fields = {"max_tokens": requested, "ignore_eos": True} | kw
    return dataclasses.replace(rec, **fields)  # type: ignore[arg-type]


def _prompt(rid: str, asked: int, sent: int | None, counted: int | None) -> StreamRecord:
    rec = stream(rid, chunks=ticks(1.0, 3, 0.01), prompt=counted)
    return dataclasses.replace(rec, requested_prompt_tokens=asked, prompt_tokens_sent=sent)


def test_short_output_fires_past_5_percent_or_50_tokens_and_not_before() -> None:
    quiet = [
        _out("a", 100, 95),  # 5 short: 5%, not more
        _out("b", 2000, 1950),  # 50 short: 2.5%, not more than 50
        _out("c", 100, 100),
    ]
    assert short_output(quiet) is None
    loud = [*quiet, _out("d", 100, 94), _out("e", 4000, 3949)]
    found = short_output(loud)
    assert found is not None
    assert (found.streams, found.judged, found.worst) == (2, 5, "e")  # 51 short beats 6
    assert (found.requested, found.delivered) == (4000, 3949)


@pytest.mark.parametrize(
    "kw",
    [
        {"ignore_eos": False},  # EOS allowed: a short answer is the model's
        {"ignore_eos": None},  # a record written before the field
        {"token_source": "chunk_count"},  # chunks, not tokens
        {"tool_calls": 1},  # a tool call ends the answer by design
        {"status": "error"},
        {"phase": "warmup"},
    ],
)
def test_short_output_judges_only_streams_that_owed_their_tokens(kw: dict) -> None:
    assert short_output([_out("a", 100, 10, **kw)]) is None


def test_prompt_drift_passes_a_template_frame_and_fires_past_it() -> None:
    quiet = [
        _prompt("a", 100, 100, 125),  # a 25-token chat frame on a short prompt
        _prompt("b", 1024, 1024, 1070),  # 46 tokens: 4.5% of it
        _prompt("c", 1024, None, None),  # nothing measured it
    ]
    assert prompt_drift(quiet) is None
    loud = [*quiet, _prompt("d", 1024, 1024, 1107), _prompt("e", 512, 600, 512)]
    found = prompt_drift(loud)
    assert found is not None
    assert (found.streams, found.judged, found.worst) == (2, 4, "e")  # 88 off beats 83
    assert (found.asked, found.sent, found.counted) == (512, 600, 512)


def test_the_early_eos_fault_parses_and_shortens_only_ignore_eos_answers() -> None:
    f = parse_fault_options(["early_eos=0.5"])
    assert f.generated_tokens(200, True) == 100 and f.generated_tokens(200, False) == 200
    assert f.generated_tokens(1, True) == 1
    assert parse_fault_options([]).generated_tokens(200, True) == 200
    with pytest.raises(ValueError, match=r"early_eos=2.*must lie in 0\.\.1"):
        parse_fault_options(["early_eos=2"])


async def test_the_banner_fires_against_a_sim_that_stops_early(tmp_path: Path) -> None:
    run = await run_virtual(UNIFORM, ["sim.faults=[early_eos=0.25]"], tmp_path)
    recs = list(run.records.values())
    assert len(recs) == 4
    for r in recs:
        # Asked 1500, sent 1500 by loadgen's count, 1500 by the server's; 200 owed, 50 given.
        assert (r.requested_prompt_tokens, r.prompt_tokens_sent, r.prompt_tokens) == (1500,) * 3
        assert (r.ignore_eos, r.max_tokens, r.completion_tokens) == (True, 200, 50)
    short = run.summary["run"]["short_output"]
    worst = "default/r0/streams/3"
    assert short == {"streams": 4, "judged": 4, "groups": ["streams"], "worst": worst,
                     "requested": 200, "delivered": 50}  # fmt: skip
    assert run.summary["run"]["prompt_drift"] is None
    report = render_report(run.run_dir)
    assert "!! SHORT OUTPUT: 4 of 4 measured ignore_eos streams" in report
    assert "worst default/r0/streams/3: 50 of 200" in report
    assert "PROMPT DRIFT" not in report


@pytest.mark.parametrize("api", ["completions", "chat"])
async def test_an_honest_run_raises_neither_banner(tmp_path: Path, api: str) -> None:
    run = await run_virtual(UNIFORM, [f"api={api}"], tmp_path)
    assert {(r.prompt_tokens_sent, r.prompt_tokens, r.completion_tokens)
            for r in run.records.values()} == {(1500, 1500, 200)}  # fmt: skip
    assert run.summary["run"]["short_output"] is None
    assert run.summary["run"]["prompt_drift"] is None
    report = render_report(run.run_dir)
    assert "SHORT OUTPUT" not in report and "PROMPT DRIFT" not in report


def test_the_banner_fires_over_http_against_the_launched_sim(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["run", "smoke", "--no-progress", "--out", str(tmp_path),
                                    "--set", "sim.faults=[early_eos=0.5]"])  # fmt: skip
    assert res.exit_code in (0, 3), res.output  # 3: the busy machine limited the client
    (run_dir,) = tmp_path.iterdir()
    recs = [r for r in read_streams(run_dir) if r.phase == "measure"]
    # smoke: max_tokens 16 (long) and 8 (short), every answer half of it.
    assert sorted((r.max_tokens, r.completion_tokens) for r in recs) == [(8, 4)] * 3 + [(16, 8)]
    assert "!! SHORT OUTPUT: 4 of 4 measured ignore_eos streams" in res.output
