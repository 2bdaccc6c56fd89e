"""`loadgen capacity`: SLO items, the bracket-and-bisect search, and the cause at the boundary,
the last on the virtual clock with known seats, a whale and a tiny KV pool (exact values)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgen.analysis.capacity import (
    DEFAULT_MAX_STEPS,
    Search,
    SloItem,
    answer,
    binding_cause,
    judge,
    nearest_rank,
    next_step,
)
from loadgen.analysis.slo import parse_slo
from loadgen.commands.capacity import capacity_cmd

from support.cli import assert_one_line_error, loadgen, rewrites_identically

VIRTUAL = ("--clock", "virtual", "--seed", "7", "--no-progress")


def test_slo_items_parse_with_their_share_and_refuse_in_one_line() -> None:
    assert parse_slo("ttft_p90=2,tpot_p99=50,e2e=10", attain=0.8) == (
        SloItem("ttft", 2.0, 0.9), SloItem("tpot", 50.0, 0.99), SloItem("e2e", 10.0, 0.8),
    )  # fmt: skip
    for text, says in [
        ("itl_p90=3", "bad item 'itl_p90=3'"),
        ("ttft_p900=1", "pNN must be in (0, 100]"),
        ("ttft_pxx=1", "pNN must be a number"),
        ("ttft_p90=-1", "ttft_p90 must be > 0 and <= 604800 s"),
        ("ttft_p90=1,ttft_p99=2", "ttft given twice"),
        ("", "no SLO given"),
    ]:
        with pytest.raises(ValueError) as err:
            parse_slo(text)
        assert says in str(err.value) and str(err.value).startswith(f"--slo {text!r}")


def _row(ttft: float | None, tpot: float | None = 0.01, status: str = "ok") -> dict[str, Any]:
    return {"status": status, "ttft_s": ttft, "tpot_s": tpot, "e2e_s": 1.0, "verdict": "admitted"}


def test_judge_counts_failed_and_missing_streams_as_misses() -> None:
    rows = [_row(0.1), _row(0.2), _row(0.3), _row(0.9), _row(None, status="error")]
    slo = (SloItem("ttft", 0.3, 0.6), SloItem("tpot", 20.0, 0.8))
    got = judge(rows, slo)
    assert got["n"] == 5 and got["good"] == 3
    assert got["items"]["ttft_p60"] == {"attainment": 0.6, "value": 0.3, "passes": True}
    # TPOT: 4 of 5 within 20 ms, the failed stream is not: 0.8 reaches 0.8.
    assert got["items"]["tpot_p80"]["attainment"] == 0.8 and got["items"]["tpot_p80"]["passes"]
    assert got["passes"]
    assert not judge(rows, (SloItem("ttft", 0.3, 0.61),))["passes"]
    assert nearest_rank([5.0, 1.0, 3.0, 2.0], 0.5) == 2.0 and nearest_rank([], 0.5) is None


def _search(search: Search, capacity: float) -> tuple[list[float], dict[str, Any]]:
    """Runs next_step against a server whose SLO holds up to `capacity` loads."""
    slo = (SloItem("ttft", 1.0, 0.9),)
    steps: list[dict[str, Any]] = []
    while (v := next_step(steps, search, slo)) is not None:
        ok = v <= capacity
        steps.append(
            {"value": v, "n": 10, "items": {"ttft_p90": {"attainment": 1.0 if ok else 0.5}}}
        )
    return [p["value"] for p in steps], answer(steps, search, slo)


def test_the_search_brackets_bisects_then_repeats_the_boundary() -> None:
    order, got = _search(Search("concurrency", 1, 256), capacity=13)
    assert order == [1, 2, 4, 8, 16, 12, 14, 13, 13, 14]
    assert got["capacity"] == 13 and got["interval"] == [13, 14] and got["ended"] == "resolved"
    assert got["runs_at"] == {"13": 2, "14": 2}


def test_the_search_ends_at_either_bound_and_at_its_probe_limit() -> None:
    # --max is confirmed as --min is: "at least 8" rested on one run of 8.
    order, got = _search(Search("concurrency", 1, 8), capacity=100)
    assert order == [1, 2, 4, 8, 8] and got["capacity"] == 8 and got["first_fail"] is None
    assert got["ended"] == "holds_at_max" and got["runs_at"] == {"8": 2}
    order, got = _search(Search("concurrency", 2, 8), capacity=1)
    assert order == [2, 2] and got["capacity"] is None and got["ended"] == "fails_at_min"
    order, got = _search(Search("concurrency", 1, 256, max_steps=5), capacity=13)
    assert len(order) == 5 and got["ended"] == "max_steps"
    # Out of steps while every load so far passed is not "holds at --max" (256 never ran).
    order, got = _search(Search("concurrency", 1, 256, max_steps=3), capacity=100)
    assert order == [1, 2, 4] and got["first_fail"] is None and got["ended"] == "max_steps"


def _probes(search: Search, capacity: float, count: int) -> list[dict[str, Any]]:
    """The first `count` steps of a search against a server that holds up to `capacity`."""
    steps: list[dict[str, Any]] = []
    while len(steps) < count and (v := next_step(steps, search, SLO)) is not None:
        share = 1.0 if v <= capacity else 0.5
        steps.append({"value": v, "n": 10, "items": {"ttft_p90": {"attainment": share}}})
    return steps


SLO = (SloItem("ttft", 1.0, 0.9),)


def test_what_stopped_a_search_is_said_only_where_the_search_was_not_done() -> None:
    search = Search("concurrency", 1, 256)
    part = _probes(search, 13, 6)
    assert answer(part, search, SLO, "max_time")["ended"] == "max_time"
    assert answer(part, search, SLO, "interrupted")["ended"] == "interrupted"
    assert answer([], search, SLO, "max_time")["ended"] == "max_time"
    assert answer(part, search, SLO)["ended"] == "interrupted"  # run.json lost its end
    done = _probes(search, 13, 99)
    assert answer(done, search, SLO, "max_time")["ended"] == "resolved"


def test_a_rate_is_bisected_to_its_relative_resolution() -> None:
    order, got = _search(Search("rate", 0.5, 64, repeats=1, rel_tol=0.1), capacity=3.3)
    assert order == [0.5, 1.0, 2.0, 4.0, 3.0, 3.5, 3.25]
    assert got["interval"] == [3.25, 3.5]


def test_a_failing_repeat_moves_the_boundary_down() -> None:
    slo = (SloItem("ttft", 1.0, 0.9),)
    search = Search("concurrency", 1, 4)

    def step(v: float, share: float) -> dict[str, Any]:
        return {"value": v, "n": 10, "items": {"ttft_p90": {"attainment": share}}}

    steps = [step(1, 1.0), step(2, 1.0), step(4, 0.0), step(3, 0.9), step(3, 0.8)]
    # 3's runs pooled: 0.85 < 0.9, so 3 fails and the boundary is now [2, 3).
    assert answer(steps, search, slo)["interval"] == [2, 3]
    assert next_step(steps, search, slo) == 2  # 2 is repeated before the search ends


def _missed(verdict: str, **evidence: Any) -> dict[str, Any]:
    return _row(5.0) | {"verdict": verdict, "evidence": evidence, "group": "m", "id": "x"}


def test_the_binding_cause_is_the_missed_streams_commonest_verdict() -> None:
    summary: dict[str, Any] = {
        "run": {"cap": {"value": 4, "source": "sim"}, "server": {}, "server_facts": {}},
        "streams": [],
    }
    slo = (SloItem("ttft", 1.0, 0.9), SloItem("tpot", 5.0, 0.9))  # TTFT 5 s, TPOT 10 ms miss
    seats = binding_cause([_missed("admission_cap")] * 2 + [_missed("prefill_hol")], summary,
                          "c=5", slo)  # fmt: skip
    assert seats["cause"] == "admission_cap" and seats["evidence"]["cap"] == 4
    assert seats["at"] == "c=5" and seats["evidence"]["verdicts"] == {
        "admission_cap": 2, "prefill_hol": 1,
    }  # fmt: skip
    batch = binding_cause([_missed("admitted")], summary, "c=9", slo)
    assert batch["cause"] == "decode_batch" and batch["evidence"]["tpot_p50_ms"] == 10.0
    assert binding_cause([], summary, "c=1", slo)["cause"] is None


def test_admitted_streams_that_miss_on_ttft_alone_bind_on_their_own_prefill() -> None:
    # One seat, a TTFT-only SLO: the miss is the prompt's own prefill; capacity and tune said
    # "decode_batch: TPOT grows with the batch" with no TPOT item and no batch.
    summary: dict[str, Any] = {"run": {"server": {}, "server_facts": {}}, "streams": []}
    ttft_only = (SloItem("ttft", 1.0, 0.9),)
    got = binding_cause([_missed("admitted")] * 3, summary, "c=1", ttft_only)
    assert got["cause"] == "own_prefill" and got["evidence"]["ttft_p50_ms"] == 5000.0
    # Met TTFT, missed TPOT: the batch's step time still binds.
    tpot_too = (SloItem("ttft", 10.0, 0.9), SloItem("tpot", 5.0, 0.9))
    assert binding_cause([_missed("admitted")], summary, "c=9", tpot_too)["cause"] == (
        "decode_batch"
    )
    # Both missed: not the prompt alone.
    both = (SloItem("ttft", 1.0, 0.9), SloItem("tpot", 5.0, 0.9))
    assert binding_cause([_missed("unexplained")], summary, "c=9", both)["cause"] == "decode_batch"


def _capacity(tmp_path: Path, scenario: str, *args: str) -> dict[str, Any]:
    proc = loadgen("capacity", scenario, *VIRTUAL, "--out", tmp_path, *args, timeout_s=300)
    assert proc.returncode == 0, proc.stderr
    (root,) = tmp_path.iterdir()
    return orjson.loads((root / "summary.json").read_bytes())["capacity"] | {"root": root}


def test_capacity_finds_the_seats_and_names_the_cap(tmp_path: Path) -> None:
    c = _capacity(tmp_path, "capacity_seats", "--over", "concurrency", "--slo", "ttft_p99=0.3")
    assert c["capacity"] == 4 and c["interval"] == [4, 5] and c["ended"] == "resolved"
    b = c["boundary"]
    assert b["cause"] == "admission_cap"
    assert (b["evidence"]["cap"], b["evidence"]["cap_source"]) == (4, "sim")
    assert [p["value"] for p in c["steps"]] == [1, 2, 4, 8, 6, 5, 4, 5]
    assert (c["root"] / "capacity.png").stat().st_size > 0
    # The report redraws the search from the steps' records alone.
    before = (c["root"] / "summary.json").read_bytes()
    again = loadgen("report", c["root"])
    assert again.returncode == 0 and (c["root"] / "summary.json").read_bytes() == before
    assert "capacity: 4 (meets the SLO pooled over 2 run(s); 5 misses it pooled" in again.stdout
    assert rewrites_identically(c["root"], "report.txt", "report.html", "capacity.png")
    assert (
        "<pre class='report'>loadgen capacity: scenario capacity_seats"
        in (c["root"] / "report.html").read_text()
    )
    # Laid out as before steps had their name (run.json's `probes` and `max_probes`, probes/ on
    # disk), the directory redraws the same search.
    manifest = orjson.loads((c["root"] / "run.json").read_bytes())
    (c["root"] / "steps").rename(c["root"] / "probes")
    runs = manifest.pop("runs")
    old = {
        **manifest,
        "probes": [{**r, "dir": r["dir"].replace("steps/", "probes/")} for r in runs],
    }
    search = old["capacity"]["search"]
    search["max_probes"] = search.pop("max_steps")
    (c["root"] / "run.json").write_bytes(orjson.dumps(old))
    assert loadgen("report", c["root"]).returncode == 0
    assert (c["root"] / "summary.json").read_bytes() == before.replace(b'"steps/', b'"probes/')
    (c["root"] / "probes").rename(c["root"] / "steps")
    # Cut short by --max-time after three steps (run.json's record of it), the report says so.
    manifest |= {"runs": runs[:3], "stopped_by": "--max-time 3600 s"}
    (c["root"] / "run.json").write_bytes(orjson.dumps(manifest))
    cut = loadgen("report", c["root"])
    assert cut.returncode == 0, cut.stderr
    assert ("capacity: at least 4 (stopped by --max-time 3600 s before the boundary was "
            "resolved)") in cut.stdout  # fmt: skip


def test_max_steps_is_still_taken_as_max_probes_and_help_names_only_the_new() -> None:
    args = ["smoke", "--slo", "ttft=1", "--over", "rate"]
    for spelling in ("--max-steps", "--max-probes"):
        ctx = capacity_cmd.make_context("capacity", [*args, spelling, "5"])
        assert ctx.params["max_steps"] == 5, spelling
    assert capacity_cmd.make_context("capacity", [*args]).params["max_steps"] == DEFAULT_MAX_STEPS
    shown = capacity_cmd.get_help(capacity_cmd.make_context("capacity", [*args]))
    assert "--max-steps" in shown and "--max-probes" not in shown


def test_a_whale_in_the_mix_binds_on_its_prefill(tmp_path: Path) -> None:
    c = _capacity(tmp_path, "capacity_whale", "--over", "concurrency", "--slo", "ttft_p90=0.3")
    assert c["capacity"] == 4 and c["boundary"]["cause"] == "prefill_hol"
    assert c["boundary"]["evidence"]["prefilling"][0] == {
        "group": "whale", "streams": 2, "prompt_tokens": 32000,
    }  # fmt: skip


def test_a_tiny_kv_pool_binds_on_pool_pressure(tmp_path: Path) -> None:
    c = _capacity(
        tmp_path, "capacity_seats", "--over", "concurrency", "--slo", "ttft_p99=0.3",
        "--set", "sim.max_num_seqs=64", "--set", "sim.num_gpu_blocks=300",
        "--set", "sim.max_model_len=2048",
    )  # fmt: skip
    assert c["capacity"] == 4 and c["boundary"]["cause"] == "pool_pressure"
    assert c["boundary"]["evidence"]["num_gpu_blocks"] == 300


def test_capacity_refuses_what_it_cannot_search_in_one_line(tmp_path: Path) -> None:
    bad_slo = loadgen("capacity", "smoke", *VIRTUAL, "--over", "rate", "--slo", "itl=3")
    assert bad_slo.returncode == 2 and "bad item 'itl=3'" in bad_slo.stderr
    trace = loadgen("capacity", "azure_code", *VIRTUAL, "--over", "rate", "--slo", "ttft=1")
    assert "a trace sets its own arrivals" in assert_one_line_error(trace)
    rng = loadgen("capacity", "smoke", *VIRTUAL, "--over", "concurrency", "--slo", "ttft=1",
                  "--min", "1.5")  # fmt: skip
    assert rng.returncode == 2 and "--min 1.5: expected a whole number" in rng.stderr


def _draws(step: Path) -> list[tuple[int, int]]:
    """Each stream's content chunks and last instant: what the engine's draws decide."""
    rows = [orjson.loads(line) for line in (step / "streams.jsonl").read_bytes().splitlines()]
    return [(r["chunks"], r["t_done_ns"]) for r in rows]


def test_each_repeat_draws_its_own_and_the_same_seed_gives_the_same_search(tmp_path: Path) -> None:
    # Speculation makes the engine draw (acceptance per step): a repeat with the first run's
    # draws re-ran it to the chunk.
    spec = ("--set", "sim.num_speculative_tokens=3", "--set", "sim.acceptance_rate=0.6")
    args = ("--over", "concurrency", "--slo", "ttft_p90=0.1", "--max", "4", *spec)
    a = _capacity(tmp_path / "a", "capacity_seats", *args)
    steps = {p.name: p for p in sorted((a["root"] / "steps").iterdir())}
    repeats = {n: p for n, p in steps.items() if ".r" in n}
    assert len(repeats) >= 2  # the boundary loads, once more each (a failing repeat moves it)
    for name, step in repeats.items():
        load = name.split("-", 1)[1].split(".r")[0]
        (first,) = [p for n, p in steps.items() if n.endswith(f"-{load}")]
        assert _draws(step) != _draws(first)
    # The whole search again with the same --seed: the same steps, the same records.
    b = _capacity(tmp_path / "b", "capacity_seats", *args)
    again = sorted((b["root"] / "steps").iterdir())
    assert [p.name for p in again] == list(steps)
    for p in again:
        assert (p / "streams.jsonl").read_bytes() == (steps[p.name] / "streams.jsonl").read_bytes()
