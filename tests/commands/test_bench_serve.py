"""`loadgen bench serve`: vllm bench serve's flags mapped to exact scenarios, every other bench
flag refused in one line, bench's summary block and result JSON as vLLM 0.32 writes them
(tests/data/vllm_bench/ holds what the real one printed and wrote against `loadgen sim`)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from loadgen.analysis.bench_result import BenchSetup, bench_result
from loadgen.commands import bench_serve
from loadgen.commands.bench_serve import MAPPED, REFUSED, bench_group, flag_table
from loadgen.scenario.bench import (
    BenchWorkload,
    Flagged,
    RangeRatio,
    bench_scenario,
    bench_tree,
    length_bounds,
    random_lengths,
)
from loadgen.scenario.load import ScenarioError
from loadgen.scenario.model import Closed, Gamma, Group, Poisson, PromptConfig, Together, Trace
from loadgen.scenario.plan import plan
from loadgen.server import installs

from support.cli import loadgen
from support.paths import DATA, REPO
from support.run_fixtures import failed, stream

BENCH_RUN = DATA / "vllm_bench"
README = REPO / "README.md"
VLLM_RESULT = orjson.loads((BENCH_RUN / "result.json").read_bytes())
# The flags vLLM's own run of the fixture was given (tests/data/vllm_bench/README.md).
FIXTURE_FLAGS = (
    *("--dataset-name", "random", "--random-input-len", "128", "--random-output-len", "32"),
    *("--num-prompts", "12", "--max-concurrency", "4", "--ignore-eos", "--disable-tqdm"),
    *("--metadata", "a=1", "b=2", "--goodput", "ttft:500", "tpot:50"),
    *("--metric-percentiles", "50,99.9", "--percentile-metrics", "ttft,tpot,itl,e2el"),
)


def plain(value: Any) -> Any:
    """bench_tree's tree without the flags its leaves carry."""
    if isinstance(value, Flagged):
        return plain(value.value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def help_flags(text: str) -> set[str]:
    """Every `--flag` an argparse help declares: its option lines, indented two spaces, with
    a flag's other spellings after a comma (`--self-timed, --no-self-timed`)."""
    declared = (re.match(r"  (--[a-z0-9-]+(?:, --[a-z0-9-]+)*)(?: |$)", line)
                for line in text.splitlines())  # fmt: skip
    return {flag for m in declared if m for flag in m.group(1).split(", ")}


# --- the flag table -------------------------------------------------------------------------


def test_every_flag_of_the_help_is_mapped_or_refused_and_none_other() -> None:
    flags = help_flags((BENCH_RUN / "help_all.txt").read_text())
    flags -= {"--help"}
    assert len(flags) > 90
    assert flags == set(MAPPED) | set(REFUSED)
    assert not set(MAPPED) & set(REFUSED)


def test_readme_holds_the_generated_table() -> None:
    assert flag_table() in README.read_text()
    assert flag_table().count("\n| `--") == len(MAPPED) + len(REFUSED)


# A real-server test (make test-real installs vLLM first): as a skip when no vLLM venv was there
# it never ran in CI, where make test comes before the install.
@pytest.mark.real
def test_the_committed_help_is_the_installed_vllms() -> None:
    from loadgen.server.vllm import _LAUNCH

    proc = subprocess.run(
        [str(installs.vllm_python()), "-c", _LAUNCH, "bench", "serve", "--help=all"],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert help_flags(proc.stdout) == help_flags((BENCH_RUN / "help_all.txt").read_text())


# --- flags -> scenario ----------------------------------------------------------------------


def test_the_issues_command_maps_to_a_rate_with_a_cap() -> None:
    w = BenchWorkload(num_prompts=200, input_len=512, output_len=128, max_concurrency=16,
                      request_rate=10.0, ignore_eos=True, seed=7)  # fmt: skip
    assert plain(bench_tree(w)) == {
        "name": "bench-serve",
        "description": "vllm bench serve's flags, through loadgen bench serve",
        "seed": 7,
        "api": "completions",
        "groups": [
            {
                "name": "random",
                "count": 200,
                "prompt": {"tokens": 512},
                "max_tokens": 128,
                "ignore_eos": True,
            }
        ],
        "arrival": {
            "poisson": {"rate_per_s": 10.0, "exact_span": True, "concurrency": 16, "count": 200}
        },
    }


def test_a_ramp_with_burstiness_maps_to_gamma_with_a_ramp() -> None:
    w = BenchWorkload(num_prompts=50, burstiness=0.5, ramp_up_strategy="linear",
                      ramp_up_start_rps=1.0, ramp_up_end_rps=20.0)  # fmt: skip
    assert plain(bench_tree(w))["arrival"] == {
        "gamma": {"ramp": {"strategy": "linear", "start_rate_per_s": 1.0,
                           "end_rate_per_s": 20.0}, "count": 50, "burstiness": 0.5}
    }  # fmt: skip


def test_datasets_map_to_the_dataset_source() -> None:
    share = BenchWorkload(dataset_name="sharegpt", dataset_path=Path("sg.json"), num_prompts=9)
    assert plain(bench_tree(share))["groups"] == [{
        "name": "sharegpt", "count": 9, "ignore_eos": False,
        "prompt": {"dataset": {"path": "sg.json", "format": "sharegpt", "turns": "first",
                               "min_input_tokens": 4, "max_input_tokens": 1024,
                               "min_output_tokens": 4, "output": "dataset"}},
    }]  # fmt: skip
    fixed = plain(bench_tree(dataclasses.replace(share, sharegpt_output_len=64)))["groups"][0]
    assert fixed["max_tokens"] == 64
    assert fixed["prompt"]["dataset"]["output"] == "fixed"
    assert "min_output_tokens" not in fixed["prompt"]["dataset"]
    custom = BenchWorkload(dataset_name="custom", dataset_path=Path("c.jsonl"), num_prompts=3)
    assert plain(bench_tree(custom))["groups"][0]["prompt"]["dataset"] == {
        "path": "c.jsonl",
        "format": "jsonl",
        "text_field": "prompt",
        "output": "fixed",
    }
    assert plain(bench_tree(custom))["groups"][0]["max_tokens"] == 256


def test_burstgpt_replays_the_trace_rows(tmp_path: Path) -> None:
    (tmp_path / "b.csv").write_bytes((DATA / "burstgpt_small.csv").read_bytes())
    w = BenchWorkload(dataset_name="burstgpt", dataset_path=Path("b.csv"), num_prompts=2)
    s = bench_scenario(w, tmp_path)
    assert s.groups == (Group("burstgpt", 1, PromptConfig(None, "prose", "salted"), None,
                              ignore_eos=False),)  # fmt: skip
    assert isinstance(s.arrival, Trace)
    assert (s.arrival.format, s.arrival.limit, len(s.arrival.rows)) == ("burstgpt", 2, 2)
    assert [(r.input_tokens, r.output_tokens) for r in s.arrival.rows] == [(472, 18), (1087, 230)]


def test_closed_loop_random_loads_to_the_exact_scenario(tmp_path: Path) -> None:
    w = BenchWorkload(num_prompts=20, input_len=64, output_len=8, max_concurrency=4,
                      ignore_eos=True, sampling={"temperature": 0.0, "top_k": 5}, seed=3,
                      goodput_ms={"ttft": 500.0, "tpot": 50.0, "e2el": 10_000.0},
                      warmups=2)  # fmt: skip
    s = bench_scenario(w, tmp_path)
    assert s.groups == (
        Group("random", 20, PromptConfig(64, "prose", "salted"), 8, ignore_eos=True),
    )
    assert s.arrival == Closed(concurrency=4, count=20)
    assert s.sampling == {"temperature": 0.0, "top_k": 5}
    # bench's --goodput is in ms; the scenario's slo has TTFT and E2E in seconds.
    assert s.slo == {"ttft_s": 0.5, "tpot_ms": 50.0, "e2e_s": 10.0}
    assert s.warmup.count == 2
    measured = [r for r in plan(s, run_seed=3).arms[0].reps[0].requests]
    assert len(measured) == 20
    assert {r.prompt.tokens for r in measured} == {64}
    assert all(r.sampling == {"temperature": 0.0, "top_k": 5} for r in measured)


@pytest.mark.parametrize(
    ("rate", "cap", "burst", "arrival"),
    [
        (math.inf, None, 1.0, Together()),
        (math.inf, 3, 1.0, Closed(concurrency=3, count=10)),
        (4.0, None, 1.0, Poisson(4.0, count=10, exact_span=True)),
        (4.0, None, 0.5, Gamma(4.0, 0.5, count=10, exact_span=True)),
    ],
)
def test_request_rate_maps_to_its_arrival(
    tmp_path: Path, rate: float, cap: int | None, burst: float, arrival: Any
) -> None:
    w = BenchWorkload(num_prompts=10, input_len=32, output_len=4, request_rate=rate,
                      max_concurrency=cap, burstiness=burst)  # fmt: skip
    s = bench_scenario(w, tmp_path)
    assert s.arrival == arrival
    # bench ignores EOS on its random dataset without --ignore-eos too.
    assert s.groups[0].count == 10 and s.groups[0].ignore_eos is True


def test_a_bad_value_is_one_line_naming_its_flag(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError) as err:
        bench_scenario(BenchWorkload(num_prompts=3, input_len=5), tmp_path)
    (line,) = err.value.errors
    assert line.startswith("--random-input-len")
    assert "groups.random.prompt.tokens: got 5" in line
    with pytest.raises(ScenarioError) as err:
        bench_scenario(BenchWorkload(num_prompts=3, input_len=32, sampling={"top_p": 2.0}),
                       tmp_path)  # fmt: skip
    assert err.value.errors == ["--top-p 2.0: sampling.top_p: got 2.0 (expected a number > 0 "
                                "and <= 1)"]  # fmt: skip


def test_range_ratio_draws_lengths_in_benchs_interval_with_the_seed() -> None:
    w = BenchWorkload(num_prompts=400, input_len=100, output_len=10, prefix_len=0, seed=5,
                      range_ratio=RangeRatio(0.25, 0.5))  # fmt: skip
    drawn = random_lengths(w)
    ins, outs = [i for i, _ in drawn], [o for _, o in drawn]
    assert (min(ins), max(ins)) == length_bounds(100, 0.25) == (75, 125)
    assert (min(outs), max(outs)) == length_bounds(10, 0.5, at_least=1) == (5, 15)
    assert random_lengths(w) == drawn
    assert random_lengths(dataclasses.replace(w, seed=6)) != drawn
    groups = plain(bench_tree(w))["groups"]
    assert Counter({(g["prompt"]["tokens"], g["max_tokens"]): g["count"] for g in groups}) == (
        Counter(drawn)
    )
    assert sum(g["count"] for g in groups) == 400
    # No ratio: one group, every request the asked size.
    assert set(random_lengths(BenchWorkload(num_prompts=5, input_len=100))) == {(100, 128)}
    assert length_bounds(1, 0.9, at_least=1) == (1, 2)


# --- refusals -------------------------------------------------------------------------------


def serve(*args: str) -> Any:
    return CliRunner().invoke(bench_group, ["serve", *args])


@pytest.mark.parametrize("flag", sorted(REFUSED))
def test_every_refused_flag_is_one_line_that_says_why(flag: str) -> None:
    result = serve("--num-prompts", "1", flag, "x")
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert lines == [f"Error: {flag}: refused: {REFUSED[flag]}"]


def test_benchs_spellings_are_taken_and_a_foreign_flag_is_clicks_error() -> None:
    # underscores and `=`: a refused flag is still caught
    result = serve("--save_detailed")
    assert "Error: --save-detailed: refused:" in result.output
    result = serve("--request-id-prefix=x-")
    assert "Error: --request-id-prefix: refused:" in result.output
    result = serve("--no-such-flag")
    assert result.exit_code == 2 and "No such option '--no-such-flag'" in result.output


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--backend", "openai-embeddings"], "--backend openai-embeddings: refused"),
        (["--backend", "openai-chat", "--endpoint", "/v1/completions"],
         "--endpoint /v1/completions: refused"),
        (["--dataset-name", "hf"], "--dataset-name hf: refused"),
        (["--dataset-name", "sharegpt"], "--dataset-name sharegpt reads a file"),
        (["--dataset-name", "sharegpt", "--dataset-path", "x", "--random-input-len", "9"],
         "--random-input-len sizes the random dataset"),
        (["--dataset-name", "burstgpt", "--dataset-path", "x", "--request-rate", "3"],
         "burstgpt: loadgen replays the trace's own timestamps"),
        (["--random-prefix-len", "8", "--random-range-ratio", "0.1"], "refused: loadgen shares"),
        (["--random-range-ratio", "1.5"], "each ratio must be in [0, 1)"),
        (["--ramp-up-strategy", "linear"], "go together"),
        (["--goodput", "ttft:fast"], "--goodput ttft:fast: expected KEY:MS"),
        (["--goodput", "queue:5"], "--goodput queue:5: expected KEY:MS"),
        (["--percentile-metrics", "ttft,bogus"], "unknown bogus"),
        (["--metric-percentiles", "50,101"], "'--metric-percentiles': '50,101': give numbers"),
        (["--metadata", "novalue"], "--metadata novalue: expected KEY=VALUE"),
        (["--host", "h", "--base-url", "http://h:1"], "--base-url or --host/--port"),
        (["--port", "8001", "--clock", "virtual"], "without HTTP; drop --host/--port or use"),
    ],
)  # fmt: skip
def test_values_loadgen_cannot_run_as_asked_are_refused(args: list[str], says: str) -> None:
    result = serve(*args)
    assert result.exit_code == 2, result.output
    assert says in result.output


def test_accepted_flags_refuse_nothing(tmp_path: Path) -> None:
    """The flags bench's own run of the fixture took pass the checks: the run goes on to the
    virtual clock and ends 0."""
    result = serve(*FIXTURE_FLAGS, "--clock", "virtual", "--seed", "1", "--out", str(tmp_path),
                   "--backend", "vllm", "--tokenizer", "tok")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "refused" not in result.output


# --- bench's block and result JSON ----------------------------------------------------------


def test_the_block_is_benchs_line_for_line() -> None:
    from loadgen.report.bench_layout import bench_block

    block = bench_block(VLLM_RESULT, ("ttft", "tpot", "itl", "e2el"), (50.0, 99.9))
    assert block == (BENCH_RUN / "block.txt").read_text().rstrip("\n")


def setup(**kw: Any) -> BenchSetup:
    base = dict(backend="vllm", model_id="m", tokenizer_id="m", num_prompts=3,
                request_rate=math.inf, burstiness=1.0, max_concurrency=None, date="d")  # fmt: skip
    return BenchSetup(**(base | kw))


def test_goodput_counts_the_streams_within_every_limit_in_ms() -> None:
    # TTFT 0.1 s and 0.6 s; TPOT 10 ms each; the run spans 0 -> 2.0 s.
    fast = stream("a", chunks=[0.1, 0.11, 0.12], sent=0.0)
    slow = stream("b", chunks=[0.6, 0.61, 0.62], sent=0.0, done=2.0)
    result = bench_result([fast, slow], setup(goodput_ms={"ttft": 500.0, "tpot": 50.0}))
    assert result["request_goodput"] == pytest.approx(1 / 2.0)
    result = bench_result([fast, slow], setup(goodput_ms={"ttft": 700.0}))
    assert result["request_goodput"] == pytest.approx(2 / 2.0)
    result = bench_result([fast, slow], setup(goodput_ms={"tpot": 5.0}))
    assert result["request_goodput"] == 0.0
    assert bench_result([fast, slow], setup())["request_goodput"] is None


def seated(rec: Any, arrived: float) -> Any:
    """`rec` as a capped open loop records it: arrived at `arrived` s, intended when seated."""
    return dataclasses.replace(rec, seat_wait_ns=rec.t_intended_ns - round(arrived * 1e9))


def test_result_figures_follow_the_records() -> None:
    # A rated run under a cap of 2, its records in the order they ended. a: arrives and is
    # sent at 0, ends at 0.4; d: arrives at 0.3, seated and sent at 0.4 as a ends; c: sent at
    # 0.45 on arrival, fails; b: arrives at 0.5, seated at 1.0, sent at 1.2.
    a = stream("a", chunks=[0.1, 0.2, 0.3], tokens=[1, 2, 2], sent=0.0, done=0.4, prompt=100)
    d = seated(stream("d", chunks=[0.5, 0.6], tokens=[1, 1], sent=0.4, done=0.7, prompt=50), 0.3)
    b = seated(stream("b", chunks=[1.5, 1.6], tokens=[1, 1], sent=1.2, intended=1.0,
                      prompt=50), 0.5)  # fmt: skip
    c = failed("c", sent=0.45, done=0.5)
    metrics = ("ttft", "client_queue_time", "e2el_including_client_queue")
    r = bench_result(
        [c, a, d, b],
        setup(
            request_rate=10.0,
            max_concurrency=2,
            percentile_metrics=metrics,
            percentiles=(50.0, 99.9),
        ),
    )
    assert (r["completed"], r["failed"]) == (3, 1)
    assert (r["total_input_tokens"], r["total_output_tokens"]) == (200, 9)
    assert r["mean_ttft_ms"] == pytest.approx((100 + 100 + 300) / 3)
    assert r["p50_ttft_ms"] == pytest.approx(100)
    assert "mean_tpot_ms" not in r
    # bench's queue: arrival to send, the wait for a seat included (0, 0.1 and 0.7 s).
    assert r["mean_client_queue_time_ms"] == pytest.approx((0 + 100 + 700) / 3)
    assert r["p99.9_client_queue_time_ms"] == pytest.approx(100 + 0.998 * 600)
    assert r["median_e2el_including_client_queue_ms"] == pytest.approx(400)
    # In request order (a, d, c, b), a failed request's latency 0.
    assert r["latencies"] == pytest.approx([0.4, 0.3, 0.0, 0.401])
    assert r["queue_times"] == pytest.approx([0.0, 0.1, 0.0, 0.7])
    # a and d share second 0 but never overlap (d is sent as a ends): a peak of 1, not 2.
    assert r["max_concurrent_requests"] == 1
    assert r["max_output_tokens_per_s"] == 7.0


def test_a_closed_loop_queues_every_request_from_the_start() -> None:
    # --max-concurrency 2 at an infinite rate: bench queues all three at once; z's seat frees
    # at 0.5 s, so it waited 0.5 s. Without the cap every request is sent on arrival.
    x = stream("x", chunks=[0.2], sent=0.0, done=0.5)
    y = stream("y", chunks=[0.3], sent=0.0, done=0.6)
    z = stream("z", chunks=[0.7], sent=0.5, done=0.8)
    capped = bench_result([x, y, z], setup(max_concurrency=2))
    assert capped["queue_times"] == pytest.approx([0.0, 0.0, 0.5])
    assert capped["max_concurrent_requests"] == 2
    assert bench_result([x, y, z], setup())["queue_times"] == pytest.approx([0.0, 0.0, 0.0])


def test_loadgen_writes_benchs_field_names_against_the_sim(tmp_path: Path) -> None:
    """The fixture's flags through `loadgen bench serve` on the wall-clock sim: the result
    has bench's keys in bench's order and each value of bench's type, so a script that reads
    one reads the other; the printed block has bench's labels in bench's order."""
    proc = loadgen("bench", "serve", *FIXTURE_FLAGS, "--backend", "vllm", "--seed", "4",
                   "--out", tmp_path / "runs", "--save-result", "--result-dir",
                   tmp_path / "results", "--result-filename", "lg.json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    ours = json.loads((tmp_path / "results" / "lg.json").read_text())
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert json.loads((run_dir / "bench_result.json").read_text()) == ours
    assert list(ours) == list(VLLM_RESULT)
    assert {k: type(v) for k, v in ours.items() if k != "label"} == {
        k: type(v) for k, v in VLLM_RESULT.items() if k != "label"
    }
    assert (ours["completed"], ours["failed"], ours["num_prompts"]) == (12, 0, 12)
    assert ours["total_output_tokens"] == 12 * 32
    assert ours["total_input_tokens"] == 12 * 128
    assert (ours["a"], ours["b"], ours["max_concurrency"]) == ("1", "2", 4)
    assert labels(proc.stdout) == labels((BENCH_RUN / "block.txt").read_text())
    assert "Verdicts per group" in proc.stdout


def labels(text: str) -> list[str]:
    """The block's lines with their figures cut off: banners and labels, in order."""
    block = text[text.index("=" * 12 + " Serving") :]
    block = block[: block.index("=" * 50 + "\n", 10) + 50]
    return [line.split(":")[0] for line in block.splitlines()]


async def test_sampling_flags_reach_every_request_body(tmp_path: Path) -> None:
    from loadgen.engine.materialize import materialize
    from loadgen.request import wire_body
    from loadgen.scenario.prompts import PromptBuilder, WordCounter

    async def bodies(w: BenchWorkload) -> list[dict[str, Any]]:
        reqs = plan(bench_scenario(w, tmp_path), run_seed=1).arms[0].reps[0].requests
        builder = PromptBuilder(WordCounter())
        built = [await materialize(r, builder, model="m", t_intended_ns=0) for r in reqs]
        return [wire_body(b, continuous=False) for b in built]

    sampled = BenchWorkload(num_prompts=3, input_len=32, output_len=4,
                            sampling={"temperature": 0.5, "top_p": 0.9})  # fmt: skip
    for body in await bodies(sampled):
        assert (body["temperature"], body["top_p"]) == (0.5, 0.9)
        assert body["max_tokens"] == 4 and body["ignore_eos"] is True
    for body in await bodies(BenchWorkload(num_prompts=3, input_len=32, output_len=4)):
        assert "temperature" not in body and "top_p" not in body


def test_the_run_seed_draws_the_lengths(tmp_path: Path) -> None:
    """--seed reproduces the drawn lengths (as it does salts and arrivals); another seed, or
    a fresh one per run when none is given, draws others."""
    runs = iter(range(100))
    printed: list[str] = []

    def groups(*seed: str) -> list[str]:
        out = tmp_path / str(next(runs))
        result = serve("--clock", "virtual", *seed, "--out", str(out), "--num-prompts", "6",
                       "--random-input-len", "64", "--random-output-len", "8",
                       "--random-range-ratio", "0.5")  # fmt: skip
        assert result.exit_code == 0, result.output
        printed.append(result.output)
        (run_dir,) = out.iterdir()
        summary = json.loads((run_dir / "summary.json").read_text())
        return sorted(summary["benchmark"]["groups"])

    first = groups("--seed", "5")
    # At most 6 groups: loadgen's verdict table per group follows bench's block.
    assert "Verdicts per group" in printed[-1]
    assert len(first) > 1 and all(g.startswith("random-") for g in first)
    assert groups("--seed", "5") == first
    assert groups("--seed", "6") != first
    # 6 draws from 65 x 9 pairs: two fresh seeds drawing the same are a 1e-16 chance.
    assert groups() != groups()


def test_save_result_names_and_appends_as_bench_does(tmp_path: Path) -> None:
    base = ("--clock", "virtual", "--seed", "2", "--num-prompts", "4", "--random-input-len",
            "32", "--random-output-len", "4", "--max-concurrency", "2", "--out",
            str(tmp_path / "runs"), "--result-dir", str(tmp_path / "res"))  # fmt: skip
    assert serve(*base, "--save-result", "--label", "lab").exit_code == 0
    (saved,) = (tmp_path / "res").iterdir()
    # bench's own name: LABEL-RATEqps-concurrencyC-MODEL-DATE.json
    assert re.fullmatch(r"lab-infqps-concurrency2-loadgen-sim-\d{8}-\d{6}\.json", saved.name)
    for _ in range(2):
        result = serve(*base, "--append-result", "--result-filename", "all.json")
        assert result.exit_code == 0, result.output
    lines = (tmp_path / "res" / "all.json").read_text().splitlines()
    assert [json.loads(line)["completed"] for line in lines] == [4, 4]


def test_a_result_dir_that_cannot_be_made_fails_before_any_request(tmp_path: Path) -> None:
    # bench finds out after its whole run; loadgen said so in a traceback after its own.
    (tmp_path / "file").write_text("")
    result = serve("--clock", "virtual", "--num-prompts", "2", "--random-input-len", "32",
                   "--out", str(tmp_path / "runs"), "--save-result", "--result-dir",
                   str(tmp_path / "file" / "res"))  # fmt: skip
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        f"Error: --result-dir {tmp_path / 'file' / 'res'}: cannot create it (Not a directory)"
    ]
    assert not (tmp_path / "runs").exists()


def test_a_ramp_names_its_result_with_benchs_whole_rates(tmp_path: Path) -> None:
    result = serve("--clock", "virtual", "--seed", "2", "--num-prompts", "4",
                   "--random-input-len", "32", "--random-output-len", "2", "--ramp-up-strategy",
                   "linear", "--ramp-up-start-rps", "5", "--ramp-up-end-rps", "40", "--out",
                   str(tmp_path / "runs"), "--save-result", "--result-dir",
                   str(tmp_path / "res"))  # fmt: skip
    assert result.exit_code == 0, result.output
    (saved,) = (tmp_path / "res").iterdir()
    assert saved.name.startswith("openai-ramp-up-linear-5qps-40qps-loadgen-sim-")


def test_the_general_lengths_win_over_the_datasets_own(monkeypatch: pytest.MonkeyPatch) -> None:
    # bench maps --input-len / --output-len onto every dataset's length flags, after them.
    asked: list[Any] = []
    monkeypatch.setattr(bench_serve, "run_bench", asked.append)
    result = serve("--random-input-len", "32", "--input-len", "100", "--random-output-len", "4",
                   "--output-len", "9")  # fmt: skip
    assert result.exit_code == 0, result.output
    shared = ("--dataset-name", "sharegpt", "--dataset-path", "x", "--sharegpt-output-len", "5",
              "--output-len", "7")  # fmt: skip
    assert serve(*shared).exit_code == 0
    assert (asked[0].workload.input_len, asked[0].workload.output_len) == (100, 9)
    assert asked[1].workload.sharegpt_output_len == 7
    # --input-len sizes the random dataset only: elsewhere it would be ignored, so it is refused.
    result = serve(*shared, "--input-len", "100")
    assert result.exit_code == 2 and len(asked) == 2
    assert "Error: --input-len sizes the random dataset: drop it or use --dataset-name random" in (
        result.output
    )


def test_many_drawn_groups_print_their_verdicts_as_one_line(tmp_path: Path) -> None:
    result = serve("--clock", "virtual", "--seed", "3", "--out", str(tmp_path), "--num-prompts",
                   "30", "--random-input-len", "64", "--random-output-len", "8",
                   "--random-range-ratio", "0.5")  # fmt: skip
    assert result.exit_code == 0, result.output
    (line,) = [x for x in result.output.splitlines() if x.startswith("Verdicts over ")]
    assert re.fullmatch(r"Verdicts over (1[1-9]|2\d|30) groups: admitted \d+.*\(per group: "
                        r"report.txt\)", line)  # fmt: skip
    assert "Verdicts per group" not in result.output


def test_host_port_and_served_model_name_reach_the_target(tmp_path: Path) -> None:
    small = ("--num-prompts", "2", "--random-input-len", "32", "--random-output-len", "2",
             "--out", str(tmp_path))  # fmt: skip
    result = serve("--host", "127.0.0.1", "--port", "1", *small)
    assert result.exit_code == 1
    assert "Error: cannot connect to http://127.0.0.1:1" in result.output
    result = serve("--served-model-name", "nope", *small)
    assert result.exit_code == 1
    assert "model 'nope' is not served by" in result.output
