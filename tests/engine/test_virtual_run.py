"""`loadgen run --clock virtual`: the plan straight into the sim's engine on a discrete-event
clock. Records are checked against the engine's own truth with exact equality (there is no
client, no wire and no scheduler jitter between them), and the run is byte-repeatable."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from loadgen.analysis.inputs import arm_dirs
from loadgen.analysis.summary import analyze_run
from loadgen.records import read_streams
from loadgen.report.cmd import write_report
from loadgen.scenario.load import load_scenario
from loadgen.scenario.model import MIN_PROMPT_TOKENS

from support.paths import DATA, REPO
from support.virtual import NS, run_virtual, sim_overrides

SCENARIOS = DATA / "scenarios"
UNIFORM = SCENARIOS / "verdict_uniform.yaml"
WHALE = SCENARIOS / "verdict_whale.yaml"
# verdict_whale has no sim block: boot it as tests/analysis/test_verdicts_sim.py does.
WHALE_SIM = sim_overrides(profile="default", num_gpu_blocks=4096)
SHIPPED = sorted((REPO / "scenarios").glob("*.yaml"))


async def test_each_record_is_the_engines_steps_exactly(tmp_path: Path):
    run = await run_virtual(UNIFORM, [], tmp_path)
    assert set(run.records) == set(run.truth) and len(run.records) == 4
    for rid, rec in run.records.items():
        row = run.truth[rid]
        steps = row["tokens_per_step_ns"]
        assert rec.status == "ok" and rec.token_source == "usage_continuous"
        assert rec.completion_tokens == row["completion_tokens"] == 200
        assert rec.prompt_tokens == row["num_prompt_tokens"] == rec.requested_prompt_tokens == 1500
        assert rec.cached_tokens == row["num_cached_tokens"] == 0
        # One content chunk per step that emitted for it, arriving when that step ended.
        assert rec.chunk_ns == [end for _, end, _ in steps]
        assert rec.chunk_tokens == [n for _, _, n in steps] == [1] * 200
        assert rec.t_sent_ns == rec.t_intended_ns == row["arrival_ns"] == 0
        assert rec.t_first_ns == row["first_token_ns"]
        assert rec.t_done_ns == rec.t_last_ns == row["finished_ns"]
        assert rec.events == 201 and rec.chunks == 200 and rec.bytes == 0
    assert run.summary["run"]["clock"] == "virtual"


async def test_metrics_are_polled_on_the_virtual_grid_through_the_servers_exposition(
    tmp_path: Path,
):
    run = await run_virtual(UNIFORM, [], tmp_path)
    times = [m.t_ns for m in run.metrics]
    end = max(r.t_done_ns for r in run.records.values())
    # The opening scrape and the rep's opening edge, every 20 ms up to the last output, the
    # rep's closing edge and the closing scrape at it.
    assert times == [0, 0, *range(20_000_000, end, 20_000_000), end, end]
    last = run.metrics[-1].values
    assert last["generation_tokens_total"] == 800
    assert last["prompt_tokens_total"] == 4 * 1500
    assert last["iteration_tokens_total_count"] == len(run.sims[0].engine.iteration_tokens)
    assert max(m.values["num_requests_running"] for m in run.metrics) == 4


async def test_the_same_seed_gives_a_byte_identical_summary(tmp_path: Path):
    a = await run_virtual(WHALE, [*WHALE_SIM, "groups.minnows.start=0.1"], tmp_path / "a", seed=3)
    b = await run_virtual(WHALE, [*WHALE_SIM, "groups.minnows.start=0.1"], tmp_path / "b", seed=3)
    for d in (a.run_dir, b.run_dir):
        write_report(d)
    for name in ("summary.json", "streams.jsonl", "metrics.jsonl", "report.txt"):
        assert (a.run_dir / name).read_bytes() == (b.run_dir / name).read_bytes(), name
    ma, mb = (orjson.loads((r.run_dir / "run.json").read_bytes()) for r in (a, b))
    differ = {k for k in ma.keys() | mb.keys() if ma.get(k) != mb.get(k)}
    # Only the wall-clock labels differ (documented in README.md: run.json, not summary.json).
    assert differ <= {"started_wall", "finished_wall"}


async def test_another_seed_changes_salts_and_text_not_the_shape(tmp_path: Path):
    a = await run_virtual(WHALE, [*WHALE_SIM, "groups.minnows.start=0.1"], tmp_path / "a", seed=3)
    b = await run_virtual(WHALE, [*WHALE_SIM, "groups.minnows.start=0.1"], tmp_path / "b", seed=4)
    prompts_a, prompts_b = a.sims[0].prompts, b.sims[0].prompts
    assert set(prompts_a) == set(prompts_b)
    for rid in prompts_a:
        assert prompts_a[rid] != prompts_b[rid]  # its own salt tag opens each prompt
        assert prompts_a[rid].split()[:4] != prompts_b[rid].split()[:4]
    # Same token counts, so the same engine steps: timings and verdicts do not move.
    assert a.verdicts() == b.verdicts()
    for rid, rec in a.records.items():
        other = b.records[rid]
        assert (rec.prompt_tokens, rec.chunk_tokens) == (other.prompt_tokens, other.chunk_tokens)
        assert (rec.t_first_ns, rec.t_done_ns) == (other.t_first_ns, other.t_done_ns)
    assert a.summary["run"]["seed"] == 3 and b.summary["run"]["seed"] == 4


async def test_a_whale_first_in_line_holds_the_minnows_for_its_whole_prefill(tmp_path: Path):
    run = await run_virtual(WHALE, [*WHALE_SIM, "groups.minnows.start=0.1"], tmp_path)
    (whale,) = (r for r in run.truth.values() if r["num_prompt_tokens"] == 6000)
    for rid in run.verdicts("minnows"):
        row = run.truth[rid]
        assert whale["admitted_ns"][0] < row["arrival_ns"] < whale["first_token_ns"]
        # Not one of its tokens computed before the whale's last prefill step.
        assert row["prefill_chunks_ns"][0][0] >= whale["prefill_chunks_ns"][-1][0]
        assert run.records[rid].t_first_ns == row["first_token_ns"] > whale["first_token_ns"]
    assert set(run.verdicts("minnows").values()) == {"prefill_hol"}


async def test_closed_loop_sends_each_next_request_when_one_ends(tmp_path: Path):
    run = await run_virtual(
        UNIFORM, ["arrival={closed: {concurrency: 2, count: 6}}", "groups.streams.max_tokens=20"],
        tmp_path,
    )  # fmt: skip
    recs = sorted(run.records.values(), key=lambda r: (r.t_intended_ns, r.id))
    assert len(recs) == 6 and all(r.status == "ok" for r in recs)
    assert [r.t_intended_ns for r in recs[:2]] == [0, 0]
    ends = sorted(r.t_done_ns for r in recs)
    # Every later send is the end of an earlier stream (a worker's previous request).
    assert [r.t_intended_ns for r in recs[2:]] == ends[:4]
    for r in recs:
        in_flight = sum(o.t_sent_ns <= r.t_sent_ns < o.t_done_ns for o in recs)
        assert in_flight <= 2


async def test_a_trace_replays_its_rows_at_their_offsets(tmp_path: Path):
    trace = tmp_path / "azure_small.csv"
    trace.write_bytes((DATA / "azure_small.csv").read_bytes())
    scenario = tmp_path / "t.yaml"
    scenario.write_text(
        "name: t\nseed: 1\ngroups:\n  - name: a\n    prompt: {shape: code}\n"
        "arrival: {trace: {path: azure_small.csv}}\n"
        "sim: {profile: default, max_num_seqs: 4, max_model_len: 16384}\n"
    )
    rows = load_scenario(scenario).arrival.rows
    run = await run_virtual(scenario, [], tmp_path / "out")
    recs = sorted(run.records.values(), key=lambda r: r.t_intended_ns)
    assert [(r.t_intended_ns, r.prompt_tokens, r.completion_tokens) for r in recs] == [
        (row.offset_ns, row.input_tokens, row.output_tokens) for row in rows
    ]
    assert all(r.t_sent_ns == r.t_intended_ns for r in recs)


async def test_trace_rows_under_the_minimum_prompt_are_raised_with_a_note(tmp_path: Path):
    scenario = tmp_path / "t.yaml"
    scenario.write_text(
        "name: t\nseed: 1\ngroups:\n  - name: a\n    prompt: {shape: code}\n"
        "arrival: {trace: {path: short.csv}}\nsim: {profile: default, max_num_seqs: 4}\n"
    )
    trace = tmp_path / "short.csv"
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,3,4\n"
        "2023-11-16 18:17:04.0319600,200,4\n"
    )
    run = await run_virtual(scenario, [], tmp_path / "out")
    assert sorted(r.requested_prompt_tokens for r in run.records.values()) == [16, 200]
    raised = {"rows": 1, "of": 2, "smallest": 3, "raised_to": MIN_PROMPT_TOKENS}
    assert run.summary["run"]["trace_prompts_raised"] == raised
    write_report(run.run_dir)
    text = (run.run_dir / "report.txt").read_text()
    assert "note: 1 of 2 trace rows ask for fewer than 16 prompt tokens (smallest 3)" in text
    # A trace whose rows are all long enough says nothing of it.
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9,20,4\n")
    quiet = await run_virtual(scenario, [], tmp_path / "quiet")
    assert quiet.summary["run"]["trace_prompts_raised"] is None
    write_report(quiet.run_dir)
    assert "trace rows ask for fewer" not in (quiet.run_dir / "report.txt").read_text()


async def test_injected_http_errors_and_drops_become_the_clients_error_records(tmp_path: Path):
    run = await run_virtual(UNIFORM, sim_overrides(faults="[http500=1.0]"), tmp_path / "500")
    assert {r.error.cls for r in run.records.values()} == {"http_500"}
    assert all(r.chunks == 0 and r.t_done_ns == r.t_sent_ns for r in run.records.values())
    assert run.truth == {}  # the engine never saw them
    run = await run_virtual(UNIFORM, sim_overrides(faults="[drop=1.0]"), tmp_path / "drop")
    for rid, rec in run.records.items():
        assert rec.error.cls == "connection_closed" and rec.chunks == 1
        assert run.truth[rid]["finish_reason"] == "abort"
        assert rec.t_done_ns == rec.t_first_ns == run.truth[rid]["first_token_ns"]


async def test_a_stall_longer_than_the_idle_timeout_times_the_stream_out(tmp_path: Path):
    run = await run_virtual(
        UNIFORM, [*sim_overrides(faults="[stall=1.0, stall_s=5]"), "timeouts.idle_s=2"], tmp_path
    )
    for rid, rec in run.records.items():
        assert rec.error.cls == "idle_timeout" and rec.chunks == 1
        assert rec.t_done_ns == rec.t_first_ns + 2 * NS
        # The engine had long finished; the client, stalled, never saw those tokens.
        assert run.truth[rid]["finished_ns"] < rec.t_done_ns


async def test_a_short_stall_delays_the_chunks_behind_it(tmp_path: Path):
    run = await run_virtual(UNIFORM, sim_overrides(faults="[stall=1.0, stall_s=0.5]"), tmp_path)
    for rid, rec in run.records.items():
        ends = [end for _, end, _ in run.truth[rid]["tokens_per_step_ns"]]
        resume = rec.t_first_ns + NS // 2
        assert rec.status == "ok" and rec.completion_tokens == 200
        assert rec.chunk_ns == [ends[0], *(max(t, resume) for t in ends[1:])]
    # The clock waits for the stalled deliveries, as a client does: the closing poll comes at
    # the last one, not at the engine's last step (the report read a METRICS GAP it made).
    last_done = max(r.t_done_ns for r in run.records.values())
    assert max(s.t_ns for s in run.metrics) >= last_done
    assert run.summary["run"]["server"]["polled"] is None


async def test_a_first_token_timeout_gives_up_on_a_long_prefill(tmp_path: Path):
    run = await run_virtual(WHALE, [*WHALE_SIM, "timeouts.first_token_s=0.1"], tmp_path)
    whale = run.records["default/r0/whale/0"]
    assert whale.error.cls == "first_byte_timeout" and whale.chunks == 0
    assert whale.t_done_ns == whale.t_sent_ns + NS // 10
    assert run.truth["default/r0/whale/0"]["finish_reason"] == "abort"


async def test_a_full_waiting_queue_refuses_with_503(tmp_path: Path):
    run = await run_virtual(
        UNIFORM, [*sim_overrides(max_num_seqs=1, faults="[max_waiting=1]")], tmp_path
    )
    # All four arrive at t=0: the first is queued (not yet stepped), so the queue is full.
    classes = [run.records[f"default/r0/streams/{i}"] for i in range(4)]
    assert [r.error.cls if r.error else "ok" for r in classes] == ["ok"] + ["http_503"] * 3
    assert run.metrics[-1].values["num_requests_waiting"] == 0


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
async def test_every_shipped_scenario_runs_on_the_virtual_clock(tmp_path: Path, path: Path):
    run = await run_virtual(path.stem, [], tmp_path)
    dirs = arm_dirs(run.run_dir) or [run.run_dir]
    for d in dirs:
        records = read_streams(d)
        assert records and all(r.status == "ok" for r in records), d
        summary = analyze_run(d).summary
        assert summary["run"]["clock"] == "virtual"
        assert "error" not in summary["run"]["verdicts"]
    assert len(run.sims) == len(dirs)  # one fresh engine per arm


def test_cli_refuses_virtual_with_a_base_url_in_one_line(tmp_path: Path):
    proc = subprocess.run(
        [sys.executable, "-m", "loadgen", "run", "smoke", "--clock", "virtual",
         "--base-url", "http://127.0.0.1:9", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("Error")]
    assert "--clock virtual" in line and "drop --base-url" in line
    assert not list(tmp_path.iterdir())


def test_cli_virtual_run_says_its_clock_in_the_report(tmp_path: Path):
    proc = subprocess.run(
        [sys.executable, "-m", "loadgen", "run", "smoke", "--clock", "virtual", "--out",
         str(tmp_path), "--no-progress"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "clock: virtual" in proc.stdout and "were not in the loop" in proc.stdout
    (run_dir,) = tmp_path.iterdir()
    assert "clock: virtual" in (run_dir / "report.txt").read_text()
    assert "clock: virtual" in (run_dir / "report.html").read_text()


AZURE_CODE = Path("/work/shared/traces/azure_llm_2023/AzureLLMInferenceTrace_code.csv")


@pytest.mark.skipif(not AZURE_CODE.is_file(), reason="the full Azure code trace is not here")
async def test_the_azure_code_trace_replays_on_64_seats(tmp_path: Path):
    # The first 300 rows of the hour (the whole hour is bench/virtual_scale.py's job).
    sets = [f"arrival.trace.path={AZURE_CODE}", "arrival.trace.limit=300"]
    run = await run_virtual("azure_code", sets, tmp_path)
    rows = load_scenario("azure_code", sets).arrival.rows
    recs = sorted(run.records.values(), key=lambda r: (r.t_intended_ns, r.id))
    assert len(recs) == 300 and all(r.status == "ok" for r in recs)
    # Prompts are sized exactly, never below the salt tag's floor (a 14-token row sends 16).
    assert all(r.prompt_tokens == r.requested_prompt_tokens for r in recs)
    assert sorted((r.t_intended_ns, r.prompt_tokens, r.completion_tokens) for r in recs) == sorted(
        (row.offset_ns, max(row.input_tokens, MIN_PROMPT_TOKENS), row.output_tokens) for row in rows
    )
    assert max(m.values["num_requests_running"] for m in run.metrics) <= 64


async def test_sim_token_counter_agrees_with_encoding_whatever_it_reuses():
    """Cuts, growths, fillers, special tokens and whitespace runs across the reuse point, an
    unrelated text: every count is the tokenizer's count of the text sent."""
    import random

    from loadgen.client.endpoint import Timeouts
    from loadgen.engine.virtual_run import SimTokenCounter
    from loadgen.scenario.textgen import text_chunks
    from loadgen.sim.virtual import VirtualSim, config_from_settings

    sim = VirtualSim(config_from_settings({}), Timeouts(), model="m")
    counter = SimTokenCounter(sim, chat=False, template=None)
    chunks = text_chunks("code", 7)
    base = "".join(next(chunks) for _ in range(6))
    r = random.Random(3)
    texts = [base, base[:900], base[:901] + " a", base + "\n\n   <|im_end|>xyz", "<|im_", base]
    for _ in range(60):
        cut = base[: r.randrange(1, len(base))]
        texts.append(cut + r.choice([" a", ",", "  \n\t ", "<|endoftext|>", "Zq9", ""]))
    for text in texts:
        assert await counter.count(text) == sim.tokenizer.count(text), repr(text[-40:])
