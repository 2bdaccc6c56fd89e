"""`loadgen capacity` on vLLM's CPU build with two seats: the SLO is set from a lone request's
own timing, the
search runs over concurrency 1..4 on one boot, and the cause at the boundary is the cap vLLM
reported in its boot log.

The limit sits halfway between what two users launched together pay (both prefills, about twice
a lone TTFT) and what a third pays waiting for a seat (about a whole answer): only the queue for
a seat breaks it."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from loadgen.analysis.capacity import Search, SloItem
from loadgen.engine.capacity import search_capacity
from loadgen.engine.run import Hooks, RunOptions
from loadgen.report.cmd import write_capacity_report
from loadgen.scenario.load import load_scenario
from loadgen.scenario.load_axis import LoadAxis
from loadgen.server.spec import ServerSpec

from support.paths import DATA
from support.real import note, tiny_model

pytestmark = pytest.mark.real

SCENARIO = DATA / "scenarios" / "real_capacity.yaml"
FLAGS = ("--max-num-seqs", "2", "--max-model-len", "2048")


async def _search(tmp_path: Path, slo: tuple[SloItem, ...], hi: int) -> dict:
    spec = ServerSpec("vllm", FLAGS, tiny_model("vllm"))
    opts = RunOptions(out_root=tmp_path, progress=False, server=spec, run_seed=5)
    axis = LoadAxis("concurrency", requests=8)
    root = await search_capacity(
        load_scenario(SCENARIO), axis, Search("concurrency", 1, hi, repeats=1), slo, opts,
        Hooks(warn=print),
    )  # fmt: skip
    write_capacity_report(root)
    assert (root / "capacity.png").stat().st_size > 0
    return orjson.loads((root / "summary.json").read_bytes())["capacity"]


async def test_vllm_capacity_names_its_seats(tmp_path: Path) -> None:
    timing = (SloItem("ttft", 600.0, 1.0), SloItem("e2e", 600.0, 0.5))
    lone = await _search(tmp_path / "lone", timing, hi=1)
    ttft = lone["steps"][0]["items"]["ttft_p100"]["value"]
    e2e = lone["steps"][0]["items"]["e2e_p50"]["value"]
    assert lone["capacity"] == 1 and ttft is not None and e2e is not None
    assert 2 * ttft < e2e, f"TTFT {ttft:.3f} s is too near E2E {e2e:.3f} s to tell a queue"
    limit = (2 * ttft + e2e) / 2
    c = await _search(tmp_path / "search", (SloItem("ttft", limit, 0.99),), hi=4)
    note("vllm capacity: lone", f"TTFT max {ttft:.3f} s, E2E p50 {e2e:.3f} s; SLO ttft_p99 <= "
         f"{limit:.3f} s")  # fmt: skip
    note("vllm capacity: steps", ", ".join(
        f"{p['label']} {p['items']['ttft_p99']['attainment']:.0%}" for p in c["steps"]
    ))  # fmt: skip
    note("vllm capacity", f"{c['capacity']} ({c['ended']}); binds: {c['boundary']}")
    # Two seats: two users are admitted at once, a third waits a whole answer for a seat.
    assert c["capacity"] == 2 and c["first_fail"] == 3
    b = c["boundary"]
    assert b["cause"] == "admission_cap", b
    assert (b["evidence"]["cap"], b["evidence"]["cap_source"]) == (2, "boot_log")
