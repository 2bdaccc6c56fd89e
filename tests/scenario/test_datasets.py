"""Datasets as a prompt source: the loaders (ShareGPT, JSONL, CSV, a `datasets` export), the
scenario's `prompt.dataset` block and its one-line refusals, sampling with the run seed, and
replays on the sim's virtual clock, where the server's prompt-token counter is compared with
the report's and multi-turn rows run as sessions."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.analysis.datasets import read_datasets
from loadgen.analysis.inputs import read_manifest
from loadgen.analysis.summary import analyze_run
from loadgen.engine.run import RunOptions, run_plan
from loadgen.engine.sessions import conversation
from loadgen.engine.soak import soak_scenario
from loadgen.engine.target import RunError
from loadgen.records import read_metrics, read_streams
from loadgen.report.text import render_plain
from loadgen.scenario.datasets import DatasetError, load_dataset, load_dataset_rows
from loadgen.scenario.load import ScenarioError, load_scenario
from loadgen.scenario.load_axis import LoadAxis, load_problem
from loadgen.scenario.model import DatasetConfig, Soak
from loadgen.scenario.plan import draw_rows, plan
from loadgen.scenario.prompts import salt_tag
from loadgen.sim.server import start_sim_server
from loadgen.sim.tokenizer import SimTokenizer

from support.paths import DATA, REPO
from support.sim import sim_config
from support.virtual import run_virtual

ROOT = REPO
FIXTURE = ROOT / "scenarios" / "data" / "sharegpt_small.json"
GENERATOR = DATA / "make_sharegpt.py"
TOK = SimTokenizer()

SCENARIO = """
name: ds
seed: 3
api: {api}
arrival: {arrival}
groups:
  - name: chats
    count: {count}
    prompt:
      cache: {cache}
      dataset: {dataset}
{extra}
sim: {{profile: tiny, max_num_seqs: 8, max_num_batched_tokens: 2048, block_size: 16,
      num_gpu_blocks: 4096, max_model_len: {window}, enable_prefix_caching: true}}
"""


def scenario(tmp_path: Path, dataset: str, *, count: int = 8, cache: str = "salted",
             arrival: str = "together", api: str = "completions", extra: str = "",
             window: int = 8192, data: Path | None = FIXTURE) -> Path:  # fmt: skip
    """A scenario file in tmp_path, with the fixture (or `data`) copied beside it."""
    if data is not None:
        shutil.copy(data, tmp_path / data.name)
    path = tmp_path / "ds.yaml"
    text = SCENARIO.format(api=api, arrival=arrival, count=count, cache=cache, dataset=dataset,
                           extra=extra, window=window)  # fmt: skip
    path.write_text(text)
    return path


def sharegpt(**more: object) -> str:
    fields = {"path": "sharegpt_small.json", "format": "sharegpt"} | more
    return "{" + ", ".join(f"{k}: {v}" for k, v in fields.items()) + "}"


def only_error(path: Path) -> str:
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert len(info.value.errors) == 1, info.value.errors
    line = info.value.errors[0]
    assert "\n" not in line and "Traceback" not in line
    return line


# --- the fixture --------------------------------------------------------------------------


def test_fixture_is_the_generators_output_with_varied_multi_turn_conversations():
    out = subprocess.run([sys.executable, "-c", f"import runpy; m = runpy.run_path("
                          f"{str(GENERATOR)!r}); print(m['fixture_text'](), end='')"],
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert out.stdout == FIXTURE.read_text(encoding="utf-8")
    rows = load_dataset_rows(DatasetConfig(FIXTURE, "sharegpt"), ROOT)
    assert len(rows) == 60
    multi = [r for r in rows if len(r.turns) > 1]
    assert len(multi) >= 15 and max(len(r.turns) for r in rows) == 4
    inputs = sorted(r.input_tokens for r in rows)
    outputs = sorted(r.output_tokens or 0 for r in rows)
    # Varied: from a one-line question to pasted notes, from a line of answer to pages.
    assert inputs[0] < 20 and inputs[-1] > 1000 and outputs[0] < 100 and outputs[-1] > 1500
    raw = json.loads(FIXTURE.read_text())
    assert {t["from"] for c in raw for t in c["conversations"]} == {
        "human", "gpt", "user", "assistant", "system",
    }  # fmt: skip


# --- loaders ------------------------------------------------------------------------------


def test_sharegpt_rows_are_exchanges_counted_on_loadgens_tokenizer(tmp_path: Path):
    rows = [
        {"conversations": [{"from": "system", "value": "be brief"},
                           {"from": "human", "value": "What is a tide?"},
                           {"from": "gpt", "value": "The sea rising and falling twice a day."},
                           {"from": "human", "value": "Why twice?"},
                           {"from": "gpt", "value": "Two bulges of water."},
                           {"from": "human", "value": "left unanswered"}]},
        {"conversations": [{"from": "user", "value": "Hi there"},
                           {"from": "assistant", "value": "Hello."}]},
    ]  # fmt: skip
    text = json.dumps(rows, indent=2)
    (tmp_path / "d.json").write_text(text)
    starts = [n for n, line in enumerate(text.splitlines(), 1) if line == "  {"]
    got = load_dataset_rows(DatasetConfig(Path("d.json"), "sharegpt"), tmp_path)
    first, second = got
    assert first.turns == ("What is a tide?", "Why twice?") and first.text == "What is a tide?"
    assert first.answers == (TOK.count("The sea rising and falling twice a day."),
                             TOK.count("Two bulges of water."))  # fmt: skip
    assert first.output_tokens == first.answers[0] and first.input_tokens == TOK.count(first.text)
    assert [first.line, second.line] == starts and starts[1] > 20
    assert second.turns == ("Hi there",) and second.output_tokens == TOK.count("Hello.")


def test_jsonl_csv_and_a_datasets_export_read_the_named_columns(tmp_path: Path):
    lines = [{"q": "first prompt", "n": 12}, {"q": "second, longer prompt", "n": 30}]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    # `Dataset.to_json` writes JSON lines even under a .json name.
    (tmp_path / "hf.json").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (tmp_path / "d.csv").write_text('q,n\nfirst prompt,12\n"second, longer prompt",30\n')
    for name, fmt in (("d.jsonl", "jsonl"), ("hf.json", "hf"), ("d.csv", "csv")):
        config = DatasetConfig(Path(name), fmt, text_field="q", output_field="n")
        got = load_dataset_rows(config, tmp_path)
        assert [(r.text, r.output_tokens) for r in got] == [
            ("first prompt", 12), ("second, longer prompt", 30),
        ], name  # fmt: skip
        fixed = load_dataset_rows(DatasetConfig(Path(name), fmt, "q", output="fixed"), tmp_path)
        assert [r.output_tokens for r in fixed] == [None, None]


def test_length_filters_keep_only_rows_inside_them():
    config = DatasetConfig(FIXTURE, "sharegpt", min_input_tokens=20, max_input_tokens=1024,
                           max_output_tokens=500)  # fmt: skip
    loaded = load_dataset(config, ROOT)
    assert loaded.read == 60 and loaded.filtered == 60 - len(loaded.rows) > 0
    assert all(20 <= r.input_tokens <= 1024 for r in loaded.rows)
    assert all(r.output_tokens is not None and r.output_tokens <= 500 for r in loaded.rows)
    everything = load_dataset(DatasetConfig(FIXTURE, "sharegpt"), ROOT)
    assert everything.filtered == 0 and len(everything.rows) == 60


def test_a_parquet_export_reads_the_named_columns(tmp_path: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"q": ["first prompt", "second, longer prompt"], "n": [12, 30]})
    pq.write_table(table, tmp_path / "d.parquet")
    config = DatasetConfig(Path("d.parquet"), "hf", text_field="q", output_field="n")
    got = load_dataset_rows(config, tmp_path)
    assert [(r.text, r.output_tokens, r.line) for r in got] == [
        ("first prompt", 12, 1), ("second, longer prompt", 30, 2),
    ]  # fmt: skip


def test_a_broken_parquet_file_is_one_line(tmp_path: Path):
    (tmp_path / "d.parquet").write_bytes(b"PAR1 not a table")
    with pytest.raises(DatasetError, match=r"^\S*d\.parquet: not a readable parquet file \(.+\)$"):
        load_dataset_rows(DatasetConfig(Path("d.parquet"), "hf"), tmp_path)


def test_parquet_without_pyarrow_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # None in sys.modules makes the import fail as on a machine without the extra.
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    (tmp_path / "d.parquet").write_bytes(b"PAR1")
    with pytest.raises(DatasetError, match=r"d\.parquet: reading parquet needs pyarrow"):
        load_dataset_rows(DatasetConfig(Path("d.parquet"), "hf"), tmp_path)


# --- bad datasets: one line naming file, line and field ------------------------------------


def test_a_missing_file_names_it(tmp_path: Path):
    line = only_error(scenario(tmp_path, sharegpt(path="nope.json"), data=None))
    assert "ds.yaml:" in line and "groups.chats.prompt.dataset.path" in line
    assert "nope.json: no such file" in line


def test_malformed_json_names_its_line(tmp_path: Path):
    good = json.dumps({"conversations": [{"from": "human", "value": "hi"},
                                         {"from": "gpt", "value": "hello"}]})  # fmt: skip
    (tmp_path / "bad.json").write_text("[\n" + good + ",\n" + good + ",\n{oops\n]\n")
    line = only_error(scenario(tmp_path, sharegpt(path="bad.json"), data=None))
    assert "bad.json:4: malformed JSON" in line and "dataset.path" in line
    (tmp_path / "bad.jsonl").write_text('{"prompt": "a"}\n{"prompt": "b"\n')
    line = only_error(scenario(tmp_path, "{path: bad.jsonl, format: jsonl}", extra=MAX,
                               data=None))  # fmt: skip
    assert "bad.jsonl:2: malformed JSON" in line


MAX = "    max_tokens: 16"


def test_a_row_without_its_text_field_names_line_and_field(tmp_path: Path):
    (tmp_path / "d.jsonl").write_text('{"prompt": "a"}\n\n{"text": "b"}\n')
    line = only_error(scenario(tmp_path, "{path: d.jsonl, format: jsonl}", extra=MAX, data=None))
    assert "d.jsonl:3: prompt: missing" in line and "text_field" in line
    ok = scenario(tmp_path, "{path: d.jsonl, format: jsonl, text_field: prompt}", extra=MAX,
                  data=None)  # fmt: skip
    (tmp_path / "d.jsonl").write_text('{"prompt": "a"}\n\n{"prompt": "b"}\n')
    assert load_scenario(ok).groups[0].prompt.dataset is not None


def test_empty_conversations_name_line_and_field(tmp_path: Path):
    good = {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}
    text = json.dumps([good, {"conversations": []}], indent=1)
    (tmp_path / "e.json").write_text(text)
    second = [n for n, line in enumerate(text.splitlines(), 1) if line == " {"][1]
    line = only_error(scenario(tmp_path, sharegpt(path="e.json"), data=None))
    assert f"e.json:{second}: conversations: empty" in line
    (tmp_path / "e.json").write_text(json.dumps([good, {"id": 3}], indent=1))
    assert f"e.json:{second}: conversations: missing" in only_error(
        scenario(tmp_path, sharegpt(path="e.json"), data=None)
    )


def test_every_row_filtered_out_names_the_limit(tmp_path: Path):
    line = only_error(scenario(tmp_path, sharegpt(min_input_tokens=5000)))
    assert "dataset.min_input_tokens" in line and "sharegpt_small.json: all 60 rows" in line
    assert load_scenario(scenario(tmp_path, sharegpt(min_input_tokens=500))).groups


def test_shape_file_refuses_a_dataset_file_and_points_at_dataset(tmp_path: Path):
    for suffix in (".json", ".jsonl", ".csv", ".parquet"):
        (tmp_path / f"d{suffix}").write_text("{}")
        path = tmp_path / "s.yaml"
        path.write_text(f"name: s\nseed: 1\ngroups:\n  - name: g\n    count: 1\n    max_tokens: 4\n"
                        f"    prompt: {{tokens: 64, shape: {{file: d{suffix}}}}}\n")  # fmt: skip
        line = only_error(path)
        assert f"s.yaml:7: groups.g.prompt.shape.file: got 'd{suffix}'" in line
        assert "prompt: {dataset: {path: d" in line
    (tmp_path / "d.txt").write_text("plain running text to cut prompts from\n" * 20)
    path.write_text(path.read_text().replace("d.parquet", "d.txt"))
    assert load_scenario(path).groups[0].prompt.shape == "file"


def test_block_rules_refuse_what_cannot_work_and_accept_the_rest(tmp_path: Path):
    assert "expected salted or shared" in only_error(scenario(tmp_path, sharegpt(),
                                                              cache="primed"))  # fmt: skip
    for cache in ("salted", "shared"):
        assert load_scenario(scenario(tmp_path, sharegpt(), cache=cache)).groups[0].prompt.cache
    poisson = "{poisson: {rate_per_s: 5}}"
    line = only_error(scenario(tmp_path, sharegpt(turns="all"), arrival=poisson))
    assert "turns: all under a poisson arrival" in line
    assert load_scenario(scenario(tmp_path, sharegpt(turns="first"), arrival=poisson))
    (tmp_path / "d.jsonl").write_text('{"prompt": "a"}\n')
    line = only_error(scenario(tmp_path, "{path: d.jsonl, format: jsonl, output: dataset}",
                               extra=MAX, data=None))  # fmt: skip
    assert "dataset.output: got dataset" in line and "output_field" in line
    line = only_error(scenario(tmp_path, sharegpt(path="../x.json"), data=None))
    assert "outside the scenario's folder" in line and "--allow-files-outside" in line
    # A row's answer sizes its output; under output: fixed the group's max_tokens must.
    assert "groups.chats.max_tokens: missing" in only_error(
        scenario(tmp_path, sharegpt(output="fixed"))
    )
    fixed = load_scenario(scenario(tmp_path, sharegpt(output="fixed"), extra=MAX))
    assert {r.max_tokens for r in plan(fixed).arms[0].reps[0].requests} == {16}
    answers = {r.max_tokens for r in plan(load_scenario(scenario(tmp_path, sharegpt())))
               .arms[0].reps[0].requests}  # fmt: skip
    assert len(answers) > 1 and 16 not in answers
    path = scenario(tmp_path, sharegpt(), extra="    max_tokens: 8")
    path.write_text(path.read_text().replace("cache: salted", "cache: salted\n      tokens: 64"))
    assert "prompt.tokens: set by each dataset row" in only_error(path)
    session = "    max_tokens: 8\n    session: {turns: 2, system_tokens: 32, user_tokens: 32}"
    assert "got a dataset with a session block" in only_error(
        scenario(tmp_path, sharegpt(), extra=session)
    )


# --- sampling with the run seed -------------------------------------------------------------


def sent_rows(path: Path, seed: int) -> list[str]:
    the_plan = plan(load_scenario(path), run_seed=seed)
    return [r.prompt.text or "" for r in the_plan.arms[0].reps[0].requests]


def drawn_lines(path: Path, seed: int) -> list[int]:
    """Where each drawn row starts in the file (the fixture repeats a few short questions)."""
    group = load_scenario(path).groups[0]
    return [r.line for r in draw_rows(group, seed, group.count)]


def test_the_same_seed_draws_the_same_rows_and_another_seed_others(tmp_path: Path):
    path = scenario(tmp_path, sharegpt(), count=20)
    first, again, other = sent_rows(path, 7), sent_rows(path, 7), sent_rows(path, 8)
    assert first == again and first != other
    # Without replacement while rows last: 20 of 60 distinct rows.
    assert len(set(drawn_lines(path, 7))) == 20
    many = scenario(tmp_path, sharegpt(), count=130)
    lines = drawn_lines(many, 7)
    # 60 rows, each once per pass: two whole passes, then 10 more; a longer draw starts with
    # the shorter one.
    assert len(set(lines[:60])) == 60 and len(set(lines[60:120])) == 60
    assert sent_rows(many, 7)[:20] == first


# --- replays on the sim's virtual clock -----------------------------------------------------


@pytest.mark.parametrize("cache", ["salted", "shared"])
async def test_server_prompt_token_counter_equals_the_reports(tmp_path: Path, cache: str):
    path = scenario(tmp_path, sharegpt(max_input_tokens=1024), count=12, cache=cache)
    run = await run_virtual(path, [], tmp_path / "runs", seed=11)
    records = list(run.records.values())
    assert len(records) == 12 and all(r.status == "ok" for r in records)
    counted = run.metrics[-1].values["prompt_tokens_total"] - run.metrics[0].values.get(
        "prompt_tokens_total", 0.0
    )
    reported = run.summary["benchmark"]["groups"]["chats"]["prompt_tokens"]
    assert counted == reported == sum(r.prompt_tokens or 0 for r in records)
    assert run.summary["benchmark"]["groups"]["chats"]["prompt_token_source"] == "usage"
    (block,) = read_datasets(run.summary)
    asked = sum(r.requested_prompt_tokens or 0 for r in records)
    assert (block.asked_tokens, block.server_tokens) == (asked, counted)
    # On the sim loadgen counts with the server's own tokenizer: what it sent is what it counted.
    assert block.sent_tokens == counted
    assert (block.rows_read, block.streams, block.cache) == (60, 12, cache)
    assert (block.salt_tokens > 0) == (cache == "salted") and block.salt_tokens >= 0
    report = render_plain(run.summary)
    assert "Dataset prompts" in report and f"{asked}" in report
    drawn = plan(load_scenario(path), run_seed=11).arms[0].reps[0].requests
    for req in drawn:
        rec = run.records[req.id]
        text = req.prompt.text or ""
        # Asked: the row's own text on the server's tokenizer; the server counts what was
        # sent, which a salted row opens with its salt tag.
        assert rec.requested_prompt_tokens == TOK.count(text)
        tag = TOK.count(salt_tag(req.prompt.salt)) if cache == "salted" else 0
        assert rec.prompt_tokens == TOK.count(salt_tag(req.prompt.salt) * (tag > 0) + text)
        assert (rec.prompt_tokens - rec.requested_prompt_tokens > 0) == (cache == "salted")
        assert run.sims[0].prompts[req.id].endswith(text)
        assert rec.max_tokens == req.max_tokens == rec.completion_tokens


async def test_a_run_without_a_dataset_has_no_dataset_block(tmp_path: Path):
    run = await run_virtual("smoke", [], tmp_path)
    assert run.summary["datasets"] == [] and "Dataset prompts" not in render_plain(run.summary)


async def test_the_seed_replays_the_same_rows_on_the_sim(tmp_path: Path):
    path = scenario(tmp_path, sharegpt(), count=6)
    runs = [await run_virtual(path, [], tmp_path / f"r{k}", seed=s)
            for k, s in enumerate((4, 4, 9))]  # fmt: skip

    def bodies(run: object) -> list[str]:
        # The prompt after its salt tag (the salt differs per run only when the seed does).
        return sorted(p.split("\n\n", 1)[1] for p in run.sims[0].prompts.values())  # type: ignore[attr-defined]

    assert bodies(runs[0]) == bodies(runs[1]) != bodies(runs[2])


async def test_multi_turn_rows_replay_as_sessions_with_the_servers_answers(tmp_path: Path):
    path = scenario(tmp_path, sharegpt(turns="all"), count=10)
    the_plan = plan(load_scenario(path), run_seed=2)
    rep = the_plan.arms[0].reps[0]
    assert rep.requests == () and len(rep.sessions) == 10
    drawn = {s.id: s for s in rep.sessions}
    assert any(len(s.turns) > 1 for s in rep.sessions)
    run = await run_virtual(path, [], tmp_path / "runs", seed=2)
    by_session: dict[str, list] = {}
    for rec in run.records.values():
        assert rec.status == "ok" and rec.session is not None
        by_session.setdefault(rec.session, []).append(rec)
    assert set(by_session) == set(drawn)
    for sid, recs in by_session.items():
        turns = drawn[sid].turns
        assert sorted(r.turn for r in recs) == list(range(len(turns)))
        assert [r.max_tokens for r in sorted(recs, key=lambda r: r.turn)] == [
            t.max_tokens for t in turns
        ]
    for sess in (s for s in rep.sessions if len(s.turns) > 1):
        prompts = [run.sims[0].prompts[f"{sess.id}/t{k}"] for k in range(len(sess.turns))]
        for k in range(1, len(prompts)):
            # Turn k resends turn k-1's prompt, then the sim's own answer to it, then the
            # dataset's user turn k.
            before, user = prompts[k - 1], sess.turns[k].user.text or ""
            assert prompts[k].startswith(before) and prompts[k].endswith(user)
            answer = prompts[k][len(before) : len(prompts[k]) - len(user)]
            assert TOK.count(answer) == run.records[f"{sess.id}/t{k - 1}"].completion_tokens
        assert prompts[0].endswith(sess.turns[0].user.text or "")


def dataset_block(run_dir: Path) -> dict:
    """The first group's dataset block of run.json's resolved scenario, read through its type."""
    scenario = read_manifest(run_dir).scenario
    assert scenario is not None
    return scenario["groups"][0]["prompt"]["dataset"]


async def test_a_row_longer_than_the_window_is_skipped_and_counted(tmp_path: Path):
    warned: list[str] = []
    path = scenario(tmp_path, sharegpt(too_long="skip"), count=60, window=2048)
    run = await run_virtual(path, [], tmp_path / "runs", seed=1, warn=warned.append)
    block = dataset_block(run.run_dir)
    assert block["skipped"] > 0 and block["rows"] == 60 - block["skipped"]
    assert any(f"{block['skipped']} of 60 rows" in w and "skipped" in w for w in warned)
    assert all((r.prompt_tokens or 0) + r.max_tokens <= 2048 for r in run.records.values())
    roomy = scenario(tmp_path, sharegpt(too_long="skip"), count=60, window=8192)
    run = await run_virtual(roomy, [], tmp_path / "roomy", seed=1, warn=warned.append)
    assert dataset_block(run.run_dir)["skipped"] == 0


async def test_a_row_longer_than_the_window_refuses_the_run_before_sending(tmp_path: Path):
    path = scenario(tmp_path, sharegpt(too_long="refuse"), count=4, window=2048)
    with pytest.raises(RunError) as info:
        await run_virtual(path, [], tmp_path / "runs", seed=1)
    line = str(info.value)
    assert "\n" not in line and "sharegpt_small.json:" in line and ": conversations: " in line
    assert "the built-in sim's max_model_len 2048" in line and "too_long: skip" in line
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    with pytest.raises(DatasetError):
        load_dataset(DatasetConfig(Path("nope.json"), "sharegpt"), tmp_path)


def test_replayed_conversations_are_sessions_to_a_load_axis_and_a_soak(tmp_path: Path):
    replays = load_scenario(scenario(tmp_path, sharegpt(turns="all"), count=3))
    singles = load_scenario(scenario(tmp_path, sharegpt(turns="first"), count=3))
    problem = load_problem(replays, LoadAxis("concurrency"))
    assert problem is not None and "sessions run under together or staggered" in problem
    assert load_problem(singles, LoadAxis("concurrency")) is None
    # A soak keeps a conversation's own arrival; single prompts go round a closed loop.
    assert soak_scenario(replays, Soak(concurrency=2)).arrival == replays.arrival
    assert soak_scenario(singles, Soak(concurrency=2)).arrival.kind == "closed"


async def test_over_http_the_sims_tokenize_counts_the_rows_and_its_counter_agrees(tmp_path: Path):
    """The wall-clock path: rows counted on the sim's /tokenize (chat: templated), a shared row
    asked exactly what the server counted, and the server's counter equal to the report's."""
    path = scenario(tmp_path, sharegpt(max_output_tokens=130), count=6, cache="shared",
                    api="chat")  # fmt: skip
    config = sim_config(max_num_seqs=8, max_num_batched_tokens=2048, num_gpu_blocks=4096,
                        enable_prefix_caching=True)  # fmt: skip
    async with start_sim_server(config) as sim:
        opts = RunOptions(base_url=sim.url, out_root=tmp_path / "runs", progress=False)
        run_dir = await run_plan(plan(load_scenario(path), run_seed=3), opts, warn=print)
    records = [r for r in read_streams(run_dir) if r.phase == "measure"]
    assert len(records) == 6 and all(r.status == "ok" for r in records)
    for rec in records:
        assert rec.prompt_tokens == rec.requested_prompt_tokens
    samples = read_metrics(run_dir)
    counted = samples[-1].values["prompt_tokens_total"] - samples[0].values["prompt_tokens_total"]
    summary = analyze_run(run_dir).summary
    assert counted == summary["benchmark"]["groups"]["chats"]["prompt_tokens"]
    assert counted == sum(r.prompt_tokens or 0 for r in records)


def test_a_shared_conversation_has_no_empty_system_message():
    messages, _ = conversation("chat", "", ["u0", "u1"], ["a0"])
    assert messages is not None and [m["role"] for m in messages] == ["user", "assistant", "user"]
    salted, _ = conversation("chat", "tag\n\n", ["u0"], [])
    assert salted is not None and salted[0] == {"role": "system", "content": "tag\n\n"}
