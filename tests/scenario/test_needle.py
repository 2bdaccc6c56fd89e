"""Needle prompts: the fact planted at its depth, asked back at the end, scored exact-match per
stream; the sim answers with the planted code unless the needle_miss fault says otherwise."""

from pathlib import Path

import pytest

from loadgen.analysis.summary import analyze_run
from loadgen.engine.run import RunOptions, run_plan
from loadgen.needle import RECALL_CAVEAT, find_answer, needle_hit
from loadgen.records import read_streams
from loadgen.report.text import render_plain
from loadgen.scenario.load import ScenarioError, load_scenario
from loadgen.scenario.plan import plan
from loadgen.scenario.prompts import PromptBuilder
from loadgen.sim.engine import EngineConfig
from loadgen.sim.faults import parse_fault_options
from loadgen.sim.profiles import sim_profile
from loadgen.sim.server import SimServerConfig, start_sim_server
from loadgen.sim.tokenizer import SimTokenizer

from support.paths import REPO
from support.virtual import run_virtual

SCENARIO = REPO / "scenarios" / "needle.yaml"
TOK = SimTokenizer()


class SimCounter:
    method = "local"

    async def count(self, text: str) -> int:
        return TOK.count(text)


@pytest.mark.parametrize("api", ["completions", "chat"])
async def test_virtual_sim_answers_every_needle(tmp_path: Path, api: str) -> None:
    run = await run_virtual(SCENARIO, [f"api={api}"], tmp_path)
    recs = [r for r in run.records.values() if r.phase == "measure"]
    assert len(recs) == 6
    assert all(r.needle_hit is True and len(r.needle_expected or "") == 8 for r in recs)
    assert len({r.needle_expected for r in recs}) == 6  # one code per stream
    assert [(n["group"], n["hits"], n["recall"]) for n in run.summary["needles"]] == [
        ("deep", 3, 1.0),
        ("shallow", 3, 1.0),
    ]
    report = render_plain(run.summary)
    assert "Needle recall" in report and RECALL_CAVEAT in report


async def test_needle_miss_fault_gives_recall_zero(tmp_path: Path) -> None:
    run = await run_virtual(SCENARIO, ["sim.faults=[needle_miss=1]"], tmp_path)
    recs = [r for r in run.records.values() if r.phase == "measure"]
    assert len(recs) == 6 and all(r.status == "ok" and r.needle_hit is False for r in recs)
    assert [n["recall"] for n in run.summary["needles"]] == [0.0, 0.0]


async def test_runs_without_needles_have_no_needle_table(tmp_path: Path) -> None:
    run = await run_virtual("smoke", [], tmp_path)
    assert run.summary["needles"] == []
    assert all(r.needle_expected is None and r.needle_hit is None for r in run.records.values())
    assert "Needle recall" not in render_plain(run.summary)


async def test_wall_clock_sim_answers_needles(tmp_path: Path) -> None:
    engine = EngineConfig(
        max_num_seqs=8, max_num_batched_tokens=1024, block_size=16, num_gpu_blocks=1024,
        enable_prefix_caching=True, profile=sim_profile("tiny"),
    )  # fmt: skip
    async with start_sim_server(SimServerConfig(engine=engine, max_model_len=2048)) as sim:
        opts = RunOptions(base_url=sim.url, out_root=tmp_path / "runs", progress=False)
        run_dir = await run_plan(plan(load_scenario(SCENARIO)), opts, warn=lambda m: None)
    recs = [r for r in read_streams(run_dir) if r.phase == "measure"]
    assert len(recs) == 6 and all(r.needle_hit is True for r in recs)
    recall = analyze_run(run_dir).summary["needles"]
    assert [(n["group"], n["recall"]) for n in recall] == [("deep", 1.0), ("shallow", 1.0)]


@pytest.mark.parametrize("depth", [0.0, 0.25, 0.5, 0.9, 1.0])
async def test_fact_lies_at_the_requested_depth(depth: float) -> None:
    s = load_scenario(
        SCENARIO, [f"groups.deep.prompt.depth={depth}", "groups.deep.prompt.tokens=2000"]
    )
    req = next(r for r in plan(s).arms[0].reps[0].requests if r.group == "deep")
    built = await PromptBuilder(SimCounter()).build(req.prompt)
    assert built.tokens == pytest.approx(2000, abs=2)
    at = built.text.index(" The secret code for deep-")
    question = built.text.index("\n\nWhat is the secret code")
    # Within one block (16 tokens, the scenario's block_size) of the requested fraction of the
    # prose (the text before the question, less the fact itself).
    fact_end = built.text.index(".", at) + 1
    before = TOK.count(built.text[:at])
    body = before + TOK.count(built.text[fact_end:question])
    # Depth is placed by characters (the prose's tokens are not counted again): within one block
    # (16 tokens of this text) in characters, and within 1% of the prose in tokens (16.25 of
    # 1955 tokens at depth 0.25 was the worst seen).
    head = len(req.prompt.salt) + 2
    prose_chars = at - head + question - fact_end
    assert abs(at - head - depth * prose_chars) <= 16 * prose_chars / body
    assert abs(before - depth * body) <= 0.01 * body
    assert find_answer(built.text) is not None


def test_scoring_is_exact_match_on_the_answer() -> None:
    assert needle_hit("Q7XK2MPA", " Q7XK2MPA")
    assert not needle_hit("Q7XK2MPA", " Q7XK2MP")
    assert not needle_hit("Q7XK2MPA", None)
    assert find_answer("plain prose without a question.") is None


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "groups.deep.prompt.depth=1.5",
            "groups.deep.prompt.depth: got 1.5 (expected a number >= 0 and <= 1)",
        ),
        (
            "groups.deep.prompt.depth=-0.1",
            "groups.deep.prompt.depth: got -0.1 (expected a number >= 0 and <= 1)",
        ),
        (
            "groups.shallow.prompt.shape=prose",
            "groups.shallow.prompt.depth: only applies to shape needle",
        ),
        (
            "groups.deep.prompt.cache=shared",
            "groups.deep.prompt.shape: got needle here (needs cache salted",
        ),
    ],
)
def test_needle_validation_names_the_field(override: str, message: str) -> None:
    with pytest.raises(ScenarioError) as err:
        load_scenario(SCENARIO, [override])
    assert message in str(err.value)


def test_needle_miss_fault_is_a_probability() -> None:
    assert parse_fault_options(["needle_miss=0.25"]).needle_miss == 0.25
    with pytest.raises(ValueError, match=r"needle_miss=2'. a probability must lie in 0\.\.1"):
        parse_fault_options(["needle_miss=2"])
