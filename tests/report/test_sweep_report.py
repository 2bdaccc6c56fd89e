"""Sweep reports: arms in the sweep's order, a heading per arm block, a header that says what
differs per arm, no ellipsis-cut words in the terminal, wide HTML tables that scroll."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from loadgen.analysis.sweep_types import arm_sort_key, read_sweep
from loadgen.cli import main
from loadgen.report.cmd import render_report, write_report
from loadgen.report.sweep_text import sweep_header
from loadgen.report.tables import Table
from loadgen.report.text import render_rich

from support.paths import REPO
from support.run_fixtures import sweep_arm

BUDGETS = ["2048", "1024", "512"]
ARMS = [f"max_num_batched_tokens={b}" for b in BUDGETS]


@pytest.fixture(scope="module")
def politeness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    args = ["run", "politeness", "--clock", "virtual", "--seed", "1", "--no-progress"]
    result = CliRunner().invoke(main, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    (run_dir,) = out.iterdir()
    return run_dir


def _heads(text: str) -> list[str]:
    return [line.removeprefix("== arm ").removesuffix(" ==") for line in text.splitlines()
            if line.startswith("== arm ")]  # fmt: skip


def test_arm_blocks_follow_the_declared_order_each_with_its_heading(politeness: Path) -> None:
    text = (politeness / "report.txt").read_text()
    assert _heads(text) == ARMS
    rows = [line.split()[0] for line in text.splitlines() if line.startswith(tuple(ARMS))]
    assert rows[:3] == ARMS  # the politeness table, 2048 before 512
    html = (politeness / "report.html").read_text()
    assert [html.index(f"<h2 id='arm-{a}'>Arm {a}</h2>") for a in ARMS] == sorted(
        html.index(f"<h2 id='arm-{a}'>Arm {a}</h2>") for a in ARMS
    )
    shown = render_report(politeness, arm_tables=True)
    titles = [line.split(" | ")[0] for line in shown.splitlines() if line.startswith("arm max")]
    assert list(dict.fromkeys(titles)) == [f"arm {a}" for a in ARMS]


def test_header_names_what_differs_per_arm_not_one_arms_flags(politeness: Path) -> None:
    head = (politeness / "report.txt").read_text().split("\n\n")[0].splitlines()
    assert "per arm: max_num_batched_tokens = 2048, 1024, 512" in head
    (sim,) = [line for line in head if line.startswith("sim: ")]
    assert "--max-num-batched-tokens" not in sim
    assert "--max-num-seqs 4" in sim  # shared flags stay
    # Each arm's own report still quotes its own budget.
    arm = (politeness / "arms" / ARMS[2] / "report.txt").read_text()
    assert "--max-num-batched-tokens 512" in arm


def test_undeclared_arms_sort_numerically(politeness: Path, tmp_path: Path) -> None:
    copy = tmp_path / "sweep"
    shutil.copytree(politeness, copy)
    run = orjson.loads((copy / "run.json").read_bytes())
    run["arms"] = []  # an older manifest that declares no arms
    (copy / "run.json").write_bytes(orjson.dumps(run))
    write_report(copy)
    assert _heads((copy / "report.txt").read_text()) == [ARMS[2], ARMS[1], ARMS[0]]
    assert sorted(["b=1024", "b=512", "b=2048"], key=arm_sort_key) == ["b=512", "b=1024", "b=2048"]
    assert sorted(["x", "a"], key=arm_sort_key) == ["a", "x"]


def test_ports_per_arm_replace_the_first_arms_port() -> None:
    arms = {"a": sweep_arm(flags={"tp": 1}), "b": sweep_arm(flags={"tp": 2})}
    sweep = {"run": {"target": {"url": "http://127.0.0.1:8001", "kind": "vllm"}}, "arms": arms}
    summaries = {
        "a": {"run": {"target": {"url": "http://127.0.0.1:8001"}}},
        "b": {"run": {"target": {"url": "http://127.0.0.1:8002"}}},
    }
    head = sweep_header(read_sweep({**sweep, "arm_order": ["b", "a"]}), summaries)
    assert "target http://127.0.0.1:<port per arm> (vllm)" in head[0]
    assert "ports: b=8002, a=8001" in head
    assert "per arm: tp = 2, 1" in head
    assert read_sweep({**sweep, "arm_order": ["b", "a"]}).names() == ["b", "a"]
    same = {n: {"run": {"target": {"url": "http://127.0.0.1:8001"}}} for n in arms}
    quiet = sweep_header(read_sweep(sweep), same)
    assert "8001 (vllm)" in quiet[0] and not any(x.startswith("ports:") for x in quiet)


def test_terminal_tables_never_cut_words() -> None:
    verdicts = ("referenced_prefix", "unresolved", "prefill_hol + rationed_decode")
    rows = tuple((f"stream/{i}", v, "x" * 12, "1.234") for i, v in enumerate(verdicts))
    t = Table("T", ("stream", "verdict", "evidence", "TTFT s"), rows, left=frozenset({0, 1, 2}))
    shown = render_rich([t], [], width=40)
    assert "…" not in shown
    for word in ("referenced_prefix", "unresolved", "rationed_decode"):
        assert word in shown


def test_fine_sweep_report_has_no_ellipsis_and_scrolls(tmp_path: Path) -> None:
    scenario = REPO / "scenarios" / "politeness_fine.yaml"
    args = ["run", str(scenario), "--clock", "virtual", "--seed", "1", "--no-progress"]
    result = CliRunner().invoke(main, [*args, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "…" not in result.output
    (run_dir,) = tmp_path.iterdir()
    text = (run_dir / "report.txt").read_text()
    assert "…" not in text
    assert len(_heads(text)) == 10
    budgets = [int(h.split("=")[1]) for h in _heads(text)]
    assert budgets == sorted(budgets)
    html = (run_dir / "report.html").read_text()
    assert html.count("<div class='wide'><table>") == html.count("<table>")
    assert ".wide { overflow-x: auto;" in html


def test_the_sweep_header_quotes_only_the_flags_every_arm_shares() -> None:
    # An external server's flags as the user gave them: the swept one differs per arm, so the
    # header's user line (like its target) leaves it to the per-arm line.
    flags = ["--max-num-seqs", "4", "--max-num-batched-tokens", "512"]
    target = {"url": "http://127.0.0.1:8001", "kind": "external", "flags": flags}
    arms = {f"b={b}": sweep_arm(flags={"max_num_batched_tokens": b}) for b in (512, 2048)}
    head = sweep_header(read_sweep({"run": {"target": target}, "arms": arms}))
    assert "server flags (user): --max-num-seqs 4" in head
    assert "per arm: max_num_batched_tokens = 512, 2048" in head
    same = {"b=512": sweep_arm(flags={"max_num_batched_tokens": 512})}
    quiet = sweep_header(read_sweep({"run": {"target": target}, "arms": same}))
    assert "server flags (user): " + " ".join(flags) in quiet


def test_a_sweep_opens_with_its_client_limited_arms_and_only_then(
    politeness: Path, tmp_path: Path
) -> None:
    assert "CLIENT LIMITED" not in (politeness / "report.txt").read_text()
    assert (
        orjson.loads((politeness / "summary.json").read_bytes())["run"]["arm_client_limits"] == {}
    )
    copy = tmp_path / "sweep"
    shutil.copytree(politeness, copy)
    arm_json = copy / "arms" / ARMS[2] / "run.json"
    arm = orjson.loads(arm_json.read_bytes())
    arm["client"] = (arm.get("client") or {}) | {"loop_lag_max_ms": 80.0}  # its loop fell behind
    arm_json.write_bytes(orjson.dumps(arm))
    write_report(copy)
    first = (copy / "report.txt").read_text().splitlines()[0]
    assert first == f"!! CLIENT LIMITED: {ARMS[2]}: event-loop lag max 80.0 ms > 50 ms"
    limits = orjson.loads((copy / "summary.json").read_bytes())["run"]["arm_client_limits"]
    assert list(limits) == [ARMS[2]] and limits[ARMS[2]]["loop_lag_max_ms"] == 80.0
