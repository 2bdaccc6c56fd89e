"""Goodput against SLOs: exact values on hand-made records, and `loadgen run --slo`."""

from pathlib import Path

import pytest
from click.testing import CliRunner

from loadgen.analysis.goodput import Goodput, GroupGoodput, goodput
from loadgen.analysis.slo import SloItem, parse_slo
from loadgen.analysis.streams import stream_metrics
from loadgen.cli import main
from loadgen.codec import from_json, to_json
from loadgen.records import StreamError, StreamRecord

MS = 1_000_000


def rec(rid: str, sent_ms: int, ttft_ms: int, tpot_ms: int, *, error: bool = False,
        group: str = "g") -> StreamRecord:  # fmt: skip
    chunks = [(sent_ms + ttft_ms + k * tpot_ms) * MS for k in range(5)]
    return StreamRecord(
        id=rid, group=group, rep=0, status="error" if error else "ok",
        error=StreamError("http_500", "boom") if error else None, api="completions", model="m",
        prompt_tokens=10, requested_prompt_tokens=10, completion_tokens=5, cached_tokens=None,
        chunks=5, events=6, bytes=100, token_source="usage_continuous", finish_reason="length",
        http_status=500 if error else 200, t_intended_ns=sent_ms * MS, t_sent_ns=sent_ms * MS,
        t_headers_ns=sent_ms * MS, t_first_ns=chunks[0], t_last_ns=chunks[-1],
        t_done_ns=chunks[-1] + MS, chunk_ns=chunks, chunk_tokens=[1] * 5,
    )  # fmt: skip


def test_goodput_counts_requests_meeting_every_slo() -> None:
    records = [
        rec("a", 0, 500, 20),  # good
        rec("b", 1000, 2500, 20),  # TTFT 2.5 s > 2 s
        rec("c", 2000, 100, 60),  # TPOT 60 ms > 50 ms
        rec("d", 3000, 300, 40),  # good
        rec("e", 3500, 50, 10, error=True),  # failed: never good, not throughput
    ]
    rows = {r.id: stream_metrics(r) for r in records}
    out = goodput(records, rows, {"ttft_s": 2.0, "tpot_ms": 50.0})
    assert out is not None and out.slo == {"ttft_s": 2.0, "tpot_ms": 50.0}
    g = out.groups["g"]
    # Span: first intended send (0) -> last end (e: 3500 + 50 + 4 x 10 + 1 = 3591 ms).
    assert g.span_s == pytest.approx(3.591)
    assert (g.n, g.ok, g.good) == (5, 4, 2)
    assert g.attainment == pytest.approx(0.4)
    assert g.goodput_req_s == pytest.approx(2 / 3.591)
    assert g.throughput_req_s == pytest.approx(4 / 3.591)
    # summary.json holds the derived figures beside the counts, and reads back to the same.
    assert to_json(out)["groups"]["g"]["attainment"] == pytest.approx(0.4)
    assert from_json(Goodput, to_json(out)) == out
    # An E2E SLO of 1 s also fails b (e2e 2.581 s); a and d stay good.
    e2e = goodput(records, rows, {"e2e_s": 1.0})
    assert e2e is not None and e2e.groups["g"].good == 3  # a, c (0.341 s), d
    assert goodput(records, rows, None) is None


def test_a_group_with_no_span_has_no_rates() -> None:
    g = GroupGoodput(n=1, ok=1, good=1, span_s=0.0)
    assert (g.attainment, g.goodput_req_s, g.throughput_req_s) == (1.0, None, None)
    assert GroupGoodput(0, 0, 0, 0.0).attainment is None


def test_slo_flag_parses_and_refuses_in_one_line() -> None:
    assert parse_slo("ttft=2,tpot_p99=50") == (
        SloItem("ttft", 2.0, 0.9),
        SloItem("tpot", 50.0, 0.99),
    )
    assert [i.key for i in parse_slo("e2e=10,tpot=5,ttft=1")] == ["e2e_s", "tpot_ms", "ttft_s"]
    with pytest.raises(ValueError) as err:
        parse_slo("ttfb=2")
    assert str(err.value) == (
        "--slo 'ttfb=2': bad item 'ttfb=2' (expected metric_pNN=limit, comma-separated: ttft "
        "and e2e in s, tpot in ms; pNN is the share of streams that must be within the limit (a "
        "bare metric=limit: p90))"
    )


def test_each_slo_is_counted_alone_against_its_share() -> None:
    records = [rec("a", 0, 500, 20), rec("b", 1000, 2500, 20), rec("c", 2000, 100, 60)]
    rows = {r.id: stream_metrics(r) for r in records}
    out = goodput(records, rows, {"ttft_s": 2.0, "tpot_ms": 50.0}, {"ttft_s": 0.6})
    assert out is not None
    g = out.groups["g"]
    assert g.within == {"ttft_s": 2, "tpot_ms": 2}  # b misses TTFT, c misses TPOT
    assert out.shares == {"ttft_s": 0.6, "tpot_ms": 0.9}  # tpot without a pNN: p90
    assert g.holds("ttft_s", 0.6) and not g.holds("tpot_ms", 0.9)
    assert [i.name for i in out.items] == ["ttft_p60", "tpot_p90"]
    assert from_json(Goodput, to_json(out)) == out


def test_loadgen_run_with_slo_prints_goodput(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(
        main,
        [
            "run",
            "smoke",
            "--slo",
            "ttft_p90=30,tpot=1000",
            "--out",
            str(tmp_path),
            "--no-progress",
            # The sim's engine on its own clock: every stream's TPOT is measured. Over HTTP a
            # busy machine can deliver a whole tiny stream in one socket read, leaving no TPOT.
            "--clock",
            "virtual",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "Goodput (requests meeting every SLO)" in result.output
    (run_dir,) = tmp_path.iterdir()
    report = (run_dir / "report.txt").read_text()
    notes = " ".join(report.split())
    assert "SLO: tpot_p90 <= 1000 ms, ttft_p90 <= 30 s;" in notes
    # smoke: 1 long and 3 short streams, all well inside these generous SLOs on the tiny sim.
    table = report.split("Goodput")[1].splitlines()
    assert table[3].split()[:3] == ["long", "1/1", "100.0"]
    assert table[4].split()[:3] == ["short", "3/3", "100.0"]
    assert table[3].endswith("tpot_p90 100.0 yes; ttft_p90 100.0 yes")
    bad = runner.invoke(main, ["run", "smoke", "--slo", "ttft=x", "--out", str(tmp_path)])
    assert bad.exit_code != 0 and "'x' is not a number" in bad.output
    assert "Traceback" not in bad.output


def test_run_and_capacity_take_one_slo_grammar_and_say_its_units() -> None:
    # `run --slo ttft_p90=1` was a "bad item" while `capacity --slo ttft_p90=1` worked.
    runner = CliRunner()
    for cmd in (["run", "smoke"], ["capacity", "smoke", "--over", "concurrency"]):
        bad = runner.invoke(main, [*cmd, "--slo", "ttft_p90=1,itl=2", "--clock", "virtual"])
        assert bad.exit_code == 2, bad.output
        assert bad.output.strip().splitlines()[-1] == (
            "Error: --slo 'ttft_p90=1,itl=2': bad item 'itl=2' (expected metric_pNN=limit, "
            "comma-separated: ttft and e2e in s, tpot in ms; pNN is the share of streams that "
            "must be within the limit (a bare metric=limit: p90))"
        )
        shown = " ".join(runner.invoke(main, [*cmd[:1], "--help"]).output.split())
        assert "ttft and e2e in s, tpot in ms" in shown, cmd


def test_scenario_slo_is_validated_with_file_and_line(tmp_path: Path) -> None:
    from loadgen.scenario.load import ScenarioError, load_scenario

    body = (
        "name: s\nseed: 1\ngroups:\n  - {name: a, count: 1, prompt: {tokens: 32}, max_tokens: 4}\n"
    )
    (tmp_path / "ok.yaml").write_text(body + "slo: {ttft_s: 2, tpot_ms: 50}\n")
    assert load_scenario(tmp_path / "ok.yaml").slo == {"ttft_s": 2.0, "tpot_ms": 50.0}
    (tmp_path / "bad.yaml").write_text(body + "slo:\n  ttft_s: -1\n  tpot: 50\n")
    with pytest.raises(ScenarioError) as err:
        load_scenario(tmp_path / "bad.yaml")
    assert "bad.yaml:6: slo.ttft_s: got -1" in str(err.value)
    assert "bad.yaml:7: slo.tpot: unknown key" in str(err.value)
