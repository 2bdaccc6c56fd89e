"""llama.cpp's per-request timing lines as a witness, on a llama-server launched by the run:
every stream is joined to its task's timing, and the server's eval tokens and time agree with
the client's usage count and decode span."""

from __future__ import annotations

from pathlib import Path

import pytest
from realutil import note, tiny_model

from loadgen.analysis.summary import analyze_run
from loadgen.analysis.summary_types import read_run
from loadgen.engine.run import RunOptions, run_plan
from loadgen.scenario.load import load_scenario
from loadgen.scenario.plan import plan
from loadgen.server.spec import ServerSpec

pytestmark = pytest.mark.real

SCENARIO = """
name: real_llama_witness
api: completions
seed: 6
arrival: together
groups:
  - name: pair
    count: 4
    prompt: {tokens: 64, shape: prose, cache: salted}
    max_tokens: 200
    ignore_eos: true
metrics: {poll_interval_s: 0.25}
"""


async def test_llama_cpp_timings_join_and_agree(tmp_path: Path) -> None:
    path = tmp_path / "real_llama_witness.yaml"
    path.write_text(SCENARIO)
    spec = ServerSpec("llama.cpp", ("-np", "2"), tiny_model("llama.cpp"))
    opts = RunOptions(out_root=tmp_path, progress=False, server=spec, telemetry=False)
    run_dir = await run_plan(plan(load_scenario(path)), opts, warn=print)
    witness = read_run(analyze_run(run_dir).summary).server_log
    assert witness is not None and witness.kind == "llama.cpp", witness
    assert witness.requests_note is None and len(witness.requests) == 4
    assert all(c.agrees for c in witness.requests), witness.requests
    note("llama.cpp eval vs client decode span", ", ".join(
        f"{c.eval_ms:.1f}/{c.client_decode_ms:.1f} ms" for c in witness.requests
    ))  # fmt: skip
